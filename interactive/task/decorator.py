"""``@vscode``: the only thing a user adds to a task. It wraps; the runner does the work."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

from interactive.base import console, context
from interactive.base.activation import Activation, activation
from interactive.base.names import RAW_ATTRIBUTE, task_name
from interactive.base.settings import Settings, read_settings
from interactive.base.types import TaskRef
from interactive.distributed import collective
from interactive.task import preempt, travel

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger(__name__)
_REPORTED: set[tuple[int, str]] = set()
"""(process, variable) already reported: a refused variable is one line per process."""
_REPORTING = threading.Lock()


def task_ref(fn: Callable[..., Any], workspace: Path | None = None) -> TaskRef:
    """Where ``fn`` lives, named as :func:`interactive.base.names.task_name` says (through
    wrappers that say what they wrap: Ray wraps an actor's methods for tracing)."""
    with contextlib.suppress(ValueError):  # a cycle of __wrapped__
        fn = inspect.unwrap(fn)
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    spec = getattr(sys.modules.get(fn.__module__), "__spec__", None)
    name = task_name(fn.__module__, fn.__qualname__, source, workspace or Path.cwd(),
                     getattr(spec, "name", None))
    return TaskRef(name, fn.__module__, fn.__qualname__, source)


def _check_callable(fn: Callable[..., Any]) -> None:
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise TypeError(
            f"@vscode cannot wrap the generator {fn.__qualname__}: it fails lazily, "
            "outside the call. "
            "Decorate a function that consumes it (for example returns list(...))."
        )
    if not hasattr(fn, "__qualname__"):
        raise TypeError(
            f"@vscode cannot wrap {fn!r}: it is neither a function nor a framework's task that "
            "keeps its function in .func; put @vscode directly on the def"
        )


FRAMEWORK_ATTRIBUTES = ("func", "_function")
"""Where frameworks' task objects keep the user's function: Flyte 2's ``@env.task`` in
``.func``, Ray's remote function in ``._function`` (pickled at its first ``.remote()``)."""


def _framework_task(obj: Any) -> str | None:
    """The attribute of a framework's task object that holds the user's function (None:
    not such an object): ``@vscode`` over it wraps that function in place."""
    if inspect.isroutine(obj) or inspect.isclass(obj):
        return None
    return next((a for a in FRAMEWORK_ATTRIBUTES if inspect.isfunction(getattr(obj, a, None))),
                None)


def _actor_class(obj: Any) -> type | None:
    """The class behind ``obj`` whose methods ``@vscode`` wraps: a class (under
    ``@ray.remote``), or the class a Ray actor class was made from."""
    metadata = getattr(obj, "__ray_metadata__", None)
    if metadata is not None:
        return getattr(metadata, "modified_class", None)
    return obj if inspect.isclass(obj) else None


def _wrap_methods(cls: type, decorate: Callable[[Any], Any]) -> None:
    """Every method the class defines itself (not dunders: ``__init__`` failing has no
    instance to resume on), wrapped where it is defined."""
    for name, value in list(vars(cls).items()):
        if name.startswith("__") or not inspect.isfunction(value):
            continue
        setattr(cls, name, decorate(value))


@overload
def vscode(fn: F) -> F: ...


@overload
def vscode(fn: None = None, **settings: Any) -> Callable[[F], F]: ...


def vscode(fn: Callable[..., Any] | None = None, **settings: Any) -> Any:
    """Open a VS Code debug session in the pod when the task fails (or before it starts).

    Usable bare (``@vscode``) or with settings (``@vscode(mode="startup")``); see
    docs/configuration.md. Settings are checked now, when the decorator is applied: a bad
    argument raises :class:`SettingError`; a bad ``PODCODE_*`` variable never raises, it
    keeps podcode off in the process and is reported once, at the first call.
    """
    console.install()
    checked, refused = read_settings(settings)
    carried = travel.ShippedSettings.here()
    if activation(os.environ, refused).enabled:  # before the task's init_process_group
        collective.prefer_raised_nccl_errors()
        preempt.install_ahead()  # a session waiting on any thread is woken by SIGTERM

    def decorate(function: Any) -> Any:
        attribute = _framework_task(function)
        if attribute is not None:
            setattr(function, attribute, decorate(getattr(function, attribute)))
            return function
        actor = _actor_class(function)
        if actor is not None:
            _wrap_methods(actor, decorate)
            return function
        _check_callable(function)
        ref = task_ref(function, checked.workspace)
        if inspect.iscoroutinefunction(function):
            return _async_wrapper(function, ref, checked, carried)

        enabled_path = _read_once(_load_run_task, carried)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            runner = enabled_path()
            if runner is None:  # checkpoint_dir() works outside a pod too
                token = context.current_task.set(ref.name)
                try:
                    return function(*args, **kwargs)
                finally:
                    context.current_task.reset(token)
            return runner(function, ref, checked, args, kwargs)

        setattr(wrapper, RAW_ATTRIBUTE, function)
        return wrapper

    return decorate if fn is None else decorate(fn)


def _async_wrapper(
    function: Callable[..., Any], ref: TaskRef, checked: Settings, carried: travel.ShippedSettings
) -> Any:
    """The wrapper of a coroutine function: a coroutine function too (frameworks check)."""

    enabled_path = _read_once(_load_run_task_async, carried)

    @functools.wraps(function)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        runner = enabled_path()
        if runner is not None:
            return await runner(function, ref, checked, args, kwargs)
        token = context.current_task.set(ref.name)
        try:
            return await function(*args, **kwargs)
        finally:
            context.current_task.reset(token)

    setattr(wrapper, RAW_ATTRIBUTE, function)
    return wrapper


def _load_run_task() -> Callable[..., Any]:
    from interactive.task.runner import run_task

    return run_task


def _load_run_task_async() -> Callable[..., Any]:
    from interactive.task.aio import run_task_async

    return run_task_async


def _read_once(
    load: Callable[[], Callable[..., Any]], carried: travel.ShippedSettings
) -> Callable[[], Callable[..., Any] | None]:
    """The enabled path (``load()``) or None when podcode is off: the environment is read
    once per process, at a wrapper's first call there, and the answer kept. A refused
    ``PODCODE_*`` variable keeps podcode off there, said in one line (:func:`_report`).

    Nothing process-local is held (a lock, a ContextVar: ``context`` is reached through its
    module): cloudpickle ships a task of ``__main__`` by value, closure and globals, to
    another process (Ray, Flyte), which decides for itself, with the settings ``carried``
    from where the decorator was applied (:mod:`interactive.task.travel`)."""
    chosen: dict[int, Callable[..., Any] | None] = {}

    def enabled_path() -> Callable[..., Any] | None:
        pid = os.getpid()
        if pid not in chosen:
            chosen.clear()  # another process's answer, shipped with the wrapper
            carried.apply_here()
            console.install()
            decided = activation(os.environ)
            _report(decided, pid)
            chosen[pid] = load() if decided.enabled else None
        return chosen[pid]

    return enabled_path


def _report(decided: Activation, pid: int) -> None:
    """Log each refused variable once in process ``pid``: an error when it keeps podcode
    off, a warning when podcode is off anyway."""
    for variable, line in decided.lines():
        with _REPORTING:  # two threads' first calls at once still say it once
            new = (pid, variable) not in _REPORTED
            _REPORTED.add((pid, variable))
        if new:
            log.log(decided.level, "%s", line)
