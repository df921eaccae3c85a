"""``@vscode``: the only thing a user adds to a task. It wraps; the runner does the work."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

from interactive.base.context import current_task
from interactive.base.names import task_name
from interactive.base.settings import build_settings, is_enabled
from interactive.base.types import TaskRef
from interactive.distributed import collective
from interactive.resume.plan import RAW_ATTRIBUTE

F = TypeVar("F", bound=Callable[..., Any])


def task_ref(fn: Callable[..., Any], workspace: Path | None = None) -> TaskRef:
    """Where ``fn`` lives, named as :func:`interactive.base.names.task_name` says."""
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    spec = getattr(sys.modules.get(fn.__module__), "__spec__", None)
    name = task_name(fn.__module__, fn.__qualname__, source, workspace or Path.cwd(),
                     getattr(spec, "name", None))
    return TaskRef(name, fn.__module__, fn.__qualname__, source)


def _check_callable(fn: Callable[..., Any]) -> None:
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"@vscode cannot wrap the async function {fn.__qualname__}: a debug session blocks the "
            "thread it fails on. Decorate a plain function that calls asyncio.run(...) instead."
        )
    if inspect.isgeneratorfunction(fn):
        raise TypeError(
            f"@vscode cannot wrap the generator {fn.__qualname__}: it fails lazily, "
            "outside the call. "
            "Decorate a function that consumes it (for example returns list(...))."
        )


@overload
def vscode(fn: F) -> F: ...


@overload
def vscode(fn: None = None, **settings: Any) -> Callable[[F], F]: ...


def vscode(fn: Callable[..., Any] | None = None, **settings: Any) -> Any:
    """Open a VS Code debug session in the pod when the task fails (or before it starts).

    Usable bare (``@vscode``) or with settings (``@vscode(mode="startup")``); see
    docs/configuration.md. Settings are checked now, when the decorator is applied.
    """
    checked = build_settings(settings)
    if is_enabled():  # before the task's init_process_group, which reads it
        collective.prefer_raised_nccl_errors()

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        _check_callable(function)
        ref = task_ref(function, checked.workspace)

        runner: Callable[..., Any] | None = None
        decided = False

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal runner, decided
            if not decided:  # the environment is read once, at the first call
                if is_enabled():
                    from interactive.task.runner import run_task

                    runner = run_task
                decided = True
            if runner is None:
                token = current_task.set(ref.name)  # checkpoint_dir() works outside a pod too
                try:
                    return function(*args, **kwargs)
                finally:
                    current_task.reset(token)
            return runner(function, ref, checked, args, kwargs)

        setattr(wrapper, RAW_ATTRIBUTE, function)
        return wrapper

    return decorate if fn is None else decorate(fn)
