"""Run a decorated task: cache, retries, and the debug session when it fails."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interactive import preempt
from interactive.capture import load_inputs
from interactive.configure import TaskRef
from interactive.context import current_task
from interactive.errors import InputsError, Reaped
from interactive.settings import Settings
from interactive.types import ExcInfo
from interactive.warmup import warm_up

log = logging.getLogger(__name__)

NEVER_DEBUGGED = (KeyboardInterrupt, SystemExit, GeneratorExit)


def run_task(
    fn: Callable[..., Any],
    ref: TaskRef,
    settings: Settings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The enabled path. A successful call without cache or retries costs a few microseconds:
    nothing is captured until the task fails."""
    token = current_task.set(ref.name)
    try:
        if not preempt.installed() and threading.current_thread() is threading.main_thread():
            preempt.install()
            warm_up()
        if settings.cache:
            return _cached(fn, ref, settings, args, kwargs)
        result = _attempt(fn, ref, settings, args, kwargs)
        if not preempt.check_alive():
            _leave_if_preempted(ref, settings)
        return result
    finally:
        current_task.reset(token)


def _cached(
    fn: Callable[..., Any],
    ref: TaskRef,
    settings: Settings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    from interactive.cache import TaskCache
    from interactive.store import open_store

    cache = TaskCache(open_store())
    key = cache.key(ref.name, settings.cache_version, args, kwargs, func=fn)
    hit, value = cache.get(key)
    if hit:
        log.info("%s: cached output reused (cache_version %s)", ref.name, settings.cache_version)
        return value
    result = _attempt(fn, ref, settings, args, kwargs)
    _leave_if_preempted(ref, settings)
    cache.put(key, result)
    return result


def _attempt(
    fn: Callable[..., Any],
    ref: TaskRef,
    settings: Settings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    if settings.mode == "startup":
        return debug_session(fn, ref, settings, args, kwargs, None)
    try:
        if settings.retries:
            from interactive.retry import call_with_retries

            return call_with_retries(fn, args, kwargs, settings.retries)
        return fn(*args, **kwargs)
    except NEVER_DEBUGGED:
        raise
    except BaseException:
        excinfo: ExcInfo = sys.exc_info()  # type: ignore[assignment]
    _leave_if_preempted(ref, settings)  # the pod is going: no session, checkpoint and go
    return debug_session(fn, ref, settings, args, kwargs, excinfo)


def _sync_checkpoints(ref: TaskRef) -> None:
    from interactive.checkpoint import sync_checkpoints

    try:
        sync_checkpoints(ref.name)
    except Exception:
        log.exception("checkpoints of %s could not be synced to the store", ref.name)


def _leave_if_preempted(
    ref: TaskRef, settings: Settings, edits: Callable[[], object] | None = None
) -> None:
    """After SIGTERM: on_preempt hooks (bounded), edits and checkpoints saved, exit 143."""

    def save() -> None:
        if edits is not None:
            edits()
        _sync_checkpoints(ref)

    hooks = [settings.on_preempt] if settings.on_preempt is not None else []
    preempt.exit_if_terminated(hooks, settings.preempt_grace_seconds, after=save)


def workspace_for(ref: TaskRef, settings: Settings) -> Path:
    if settings.workspace is not None:
        return settings.workspace
    if ref.source:
        return Path(ref.source).resolve().parent
    return Path.cwd()


def _inputs(
    ref: TaskRef, session: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Pristine inputs from the capture (the failed call may have mutated its own)."""
    if session.capture is not None and not session.capture.failed:
        try:
            return load_inputs(ref.name, session.home)
        except InputsError:
            log.exception("captured inputs unreadable; resuming with the objects in memory")
    return args, kwargs


def debug_session(
    fn: Callable[..., Any],
    ref: TaskRef,
    settings: Settings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    excinfo: ExcInfo | None,
) -> Any:
    """Open a session and serve it until the task succeeds, or abort/reap/preemption."""
    from interactive.resume import changed_modules, find_task, reload_modules
    from interactive.session import Command, Session
    from interactive.workspace import Snapshot

    session = Session(ref, settings, workspace_for(ref, settings))
    if excinfo is not None:
        log.error(
            "%s failed (%s: %s); opening a debug session", ref.name, excinfo[0].__name__, excinfo[1]
        )
    unregister = preempt.on_terminate(lambda: session.commands.put(Command("preempted")))
    final = "failed"
    try:
        session.open(excinfo, fn, args, kwargs)
        _sync_checkpoints(ref)  # a retry in a new pod finds the last checkpoint
        base = session.snapshot
        while True:
            command = session.wait()
            if command.kind == "abort":
                _raise_original(excinfo, ref)
            if command.kind == "reaped":
                raise Reaped(
                    f"{ref.name}: session cleaned up after being idle", command.detail
                ) from (excinfo[1] if excinfo else None)
            if command.kind == "preempted":
                _leave_if_preempted(ref, settings, session.save_edits)
            assert base is not None
            changed = [session.workspace / rel for rel in base.changed()]
            base = Snapshot.take(session.workspace)
            call_args, call_kwargs = _inputs(ref, session, args, kwargs)
            session.running()
            try:
                reload_modules(changed_modules(changed, ref.module, session.workspace))
                task = find_task(ref, fn)
                print(
                    f"podcode: resuming {ref.name} (attempt {session.state.attempt + 1})",
                    flush=True,
                )
                result = task(*call_args, **call_kwargs)
            except NEVER_DEBUGGED:
                raise
            except BaseException:
                excinfo = sys.exc_info()  # type: ignore[assignment]
                assert excinfo is not None
                log.error("%s failed again (%s); the session stays open", ref.name, excinfo[1])
                session.reopen(excinfo)
                continue
            final = "done"
            return result
    finally:
        unregister()
        session.close(final)


def _raise_original(excinfo: ExcInfo | None, ref: TaskRef) -> None:
    if excinfo is None:
        raise RuntimeError(f"{ref.name}: session aborted before the task ran")
    raise excinfo[1].with_traceback(excinfo[2])
