"""SIGTERM (eviction, preemption, deletion): note it, wake whoever waits, run hooks later.

Kubernetes sends SIGTERM, waits ``terminationGracePeriodSeconds`` (30 by
default) and then sends SIGKILL. podcode's handler does only what is safe
inside a signal handler: it records that the signal came and calls the
registered wakers (``loop.call_soon_threadsafe``, ``queue.SimpleQueue.put``,
``os.write`` to a pipe: nothing that blocks or takes a lock). The work - the
``on_preempt`` hooks, stopping code-server, exiting with status 143 - is done
afterwards by the code that was woken, outside the handler, bounded in time by
:func:`run_hooks`.

A handler installed before podcode's is still called, after podcode has
recorded the signal. The default action (terminate at once) is not: the
process ends once the hooks have run. The handler is installed from the main
thread when a task is decorated (so that a session waiting on any thread is
woken); while no decorated call is in flight and nothing waits, SIGTERM then
keeps its default action.

The main thread runs Python's signal handlers, and may be blocked in C when the signal
comes (joining the thread a framework runs the task in): a SIGTERM that another thread
took is passed on at once by :mod:`interactive.task.wakeup`.

How the process ends (:func:`end_process`), once what had to be saved is saved: on the
main thread, ``SystemExit(143)`` goes up as any exit does. On another thread it would end
that thread only, and the main thread, back from its ``join()``, would go on and end the
process with its own status (0): so the main thread is sent SIGTERM again, and the
handler raises ``SystemExit(143)`` there, wherever it waits; the program's ``finally``
blocks and ``atexit`` callbacks run, and at exit podcode makes the status 143 whatever
the main thread did with that exception (``os._exit`` after flushing, once the other
``atexit`` callbacks ran). Whatever the thread, a process still there
:data:`EXIT_FALLBACK_SECONDS` later (a framework caught the exit, a thread never ends)
is ended then.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import contextvars
import itertools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn

from interactive.base.threads import run_in_thread, start_thread
from interactive.task import wakeup

logger = logging.getLogger(__name__)

_Handler = Callable[[int, FrameType | None], Any] | int | None


class _State:
    """Process-wide preemption state (there is one SIGTERM per process)."""

    def __init__(self) -> None:
        self.terminated_at: float | None = None
        self.installed = False
        self.previous: _Handler = None
        self.wakers: dict[int, Callable[[], None]] = {}
        self.ids = itertools.count()
        self.in_handler = False
        self.idle_default = False
        """Installed ahead of any call: with no call in flight, SIGTERM acts as before."""
        self.in_flight: list[object] = []
        """A token per decorated call running now (list append/remove: atomic)."""
        self.leaving: object | None = None
        """Set once the process ends after SIGTERM (:func:`end_process`): a token, which
        the fallback checks is still the one it was armed with."""
        self.status_ours = False
        """The exit status is podcode's to set at exit: the end was decided off the main
        thread, whose own way out would give its own status."""
        self.main_told = False
        """The main thread was sent the SIGTERM that raises ``SystemExit`` there (once)."""
        self.raise_in_main = False
        """The next SIGTERM the main thread handles raises ``SystemExit(143)``."""


_state = _State()


def entering() -> object:
    """A decorated call starts: its token for :func:`leaving`."""
    token = object()
    _state.in_flight.append(token)
    return token


def leaving(token: object) -> None:
    _state.in_flight.remove(token)


def install_ahead() -> None:
    """:func:`install` at decoration time, before any call: SIGTERM keeps its default
    action while no decorated call runs and no session waits."""
    if threading.current_thread() is not threading.main_thread() or _state.installed:
        return
    install()
    _state.idle_default = _state.installed


def check_alive() -> bool:
    """False once SIGTERM arrived: ``while interactive.check_alive(): train_one_step()``."""
    return _state.terminated_at is None


def terminated_at() -> float | None:
    """``time.monotonic()`` when SIGTERM arrived, None if it did not."""
    return _state.terminated_at


def exit_status() -> int:
    """The conventional exit status of a process ended by SIGTERM: 128 + 15."""
    return 128 + int(signal.SIGTERM)


def installed() -> bool:
    """Whether :func:`install` ran (cheap: for the per-call fast path)."""
    return _state.installed


def install() -> None:
    """Handle SIGTERM (idempotent). Only the main thread can; elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        logger.debug("SIGTERM handler not installed: not in the main thread")
        return
    current = signal.getsignal(signal.SIGTERM)
    if _state.installed and current is _handle:
        _state.idle_default = False
        return
    _state.previous = None if current is _handle else current
    signal.signal(signal.SIGTERM, _handle)
    wakeup.watch(_passed_on)  # a SIGTERM that another thread takes
    _state.installed = True
    _state.idle_default = False
    logger.debug("SIGTERM handler installed (previous: %r)", _state.previous)


def on_terminate(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` once, at SIGTERM: from the handler (keep it short, non-blocking,
    lock-free) or from the thread that passes on a SIGTERM another thread took.

    If SIGTERM already arrived, ``callback`` is called at once. Returns a
    function that unregisters it.
    """
    waker_id = next(_state.ids)
    _state.wakers[waker_id] = callback
    if not check_alive() and _state.wakers.pop(waker_id, None) is not None:
        _call(callback)

    def unregister() -> None:
        _state.wakers.pop(waker_id, None)

    return unregister


def _handle(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler: record, wake, chain. No logging (its lock may be held)."""
    if _state.raise_in_main:  # sent by end_process: the task ended on another thread
        _state.raise_in_main = False
        raise SystemExit(exit_status())
    if _state.in_handler:
        return
    _state.in_handler = True
    try:
        default = _default_action()  # before the wakers are taken
        _arrived()
        previous = _state.previous
        if default:  # as if podcode were not there
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if callable(previous):
            previous(signum, frame)
    finally:
        _state.in_handler = False


def _arrived() -> None:
    """SIGTERM came: note when (the first time) and wake whoever waits, each waker once
    (the handler and :func:`_passed_on` may both see one SIGTERM)."""
    if _state.terminated_at is None:
        _state.terminated_at = time.monotonic()
    while True:
        try:
            _, waker = _state.wakers.popitem()  # atomic: one caller gets each waker
        except KeyError:
            return
        _call(waker)


def _passed_on(signum: int) -> None:
    """A signal that another thread took (:mod:`interactive.task.wakeup`), seen at once
    while the main thread may be blocked in C: SIGTERM wakes what is in flight, or, with
    nothing in flight, is sent on to the main thread, whose handler gives it its default
    action (a thread-directed signal only that thread takes)."""
    if signum != signal.SIGTERM or signal.getsignal(signal.SIGTERM) is not _handle:
        return
    if _default_action():
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
    elif _state.in_flight or _state.wakers:
        _arrived()


def _default_action() -> bool:
    """Whether SIGTERM ends the process at once, as without podcode: installed ahead, no
    decorated call in flight, nothing waiting, the process not already on its way out
    after an earlier SIGTERM, and no handler of the program's before."""
    return (_state.idle_default and not _state.wakers and not _state.in_flight
            and _state.leaving is None and _state.previous in (None, signal.SIG_DFL))


def _call(waker: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):  # a broken waker must not break the handler
        waker()


def run_hooks(hooks: Sequence[Callable[[], object]], deadline_seconds: float) -> list[str]:
    """Run ``hooks`` one after the other within ``deadline_seconds`` in all; return errors.

    Each hook runs in a daemon thread, in a copy of the caller's context (so
    ``checkpoint_dir()`` knows the task); one still running at the deadline is
    abandoned (it dies with the process) and the hooks after it are skipped.
    Errors are logged and returned as one line each, naming the hook.
    """
    deadline = time.monotonic() + deadline_seconds
    errors: list[str] = []
    for index, hook in enumerate(hooks):
        remaining = deadline - time.monotonic()
        finished, error = (False, None) if remaining <= 0 else _run_one(hook, remaining)
        if error is not None:
            errors.append(error)
        if not finished:
            late = [hook_name(h) for h in hooks[index + (error is not None) :]]
            if late:
                errors.append(
                    f"not run, the {deadline_seconds:g} s deadline passed: {', '.join(late)}"
                )
                logger.error("%s", errors[-1])
            break
    return errors


def _run_one(hook: Callable[[], object], timeout: float) -> tuple[bool, str | None]:
    """Run one hook for at most ``timeout`` seconds: (finished, error)."""
    name = hook_name(hook)
    # The hook sees the caller's current task; it stays visible to the debugger (user code).
    running = run_in_thread(
        hook, f"hook-{name}", service=False, context=contextvars.copy_context()
    )
    logger.info("running hook %s (%.1f s left)", name, timeout)
    try:
        exc = running.exception(min(timeout, threading.TIMEOUT_MAX))
    except concurrent.futures.TimeoutError:
        logger.error("hook %s did not finish before the deadline; abandoned", name)
        return False, f"hook {name} did not finish before the deadline; abandoned"
    if exc is None:
        return True, None
    logger.error("hook %s failed", name, exc_info=(type(exc), exc, exc.__traceback__))
    return True, f"hook {name} failed: {type(exc).__name__}: {exc}"


def leave(
    hooks: Sequence[Callable[[], object]],
    deadline_seconds: float,
    *,
    after: Callable[[], object] | None = None,
    then_end: bool = True,
) -> NoReturn:
    """The process was told to stop: run ``hooks`` (bounded), then ``after``, then raise
    ``SystemExit(143)``. ``after`` (saving the edits and checkpoints) runs whatever the
    hooks did. ``then_end``: the whole process is made to end now (:func:`end_process`);
    False where a session is still to be closed on the way out, which calls
    :func:`end_process` once it is."""
    try:
        run_hooks(hooks, deadline_seconds)
    except Exception:
        logger.exception("after SIGTERM: the on_preempt hooks could not be run")
    if after is not None:
        try:
            after()
        except Exception:
            logger.exception("after SIGTERM: %s failed", hook_name(after))
    logger.warning("SIGTERM: hooks done, exiting with status %d", exit_status())
    if then_end:
        end_process()
    raise SystemExit(exit_status())


EXIT_FALLBACK_SECONDS = 5.0
"""After SIGTERM, how long ``SystemExit`` has to end the process (through the frameworks
between the task and the top: asyncio's tasks, Flyte's controller, the main thread's own
``finally`` blocks and ``atexit`` callbacks, threads that are joined at exit) before the
process is ended without it. What had to be saved is saved; the pod is going anyway."""


def end_process() -> None:
    """After SIGTERM, once what had to be saved is saved: see to it that the whole process
    exits with status 143, whatever thread this is. Nothing while the process is alive.

    On the main thread the ``SystemExit`` the caller raises does it. On another thread
    it would end that thread only: the main thread is sent SIGTERM, on which the handler
    raises ``SystemExit(143)`` there (waking it from ``join()``), and the status is set to
    143 at exit (:func:`_at_exit`), as it is when the main thread is already done (the
    interpreter is waiting for this thread to exit). Either way a process still there
    :data:`EXIT_FALLBACK_SECONDS` later is ended then.
    """
    if check_alive():
        return
    if _state.leaving is None:
        _state.leaving = token = object()
        start_thread(_exit_if_still_here, "exit", token)
    if threading.current_thread() is threading.main_thread():
        return
    _state.status_ours = True
    main = threading.main_thread()
    if _state.main_told or not main.is_alive() or main.ident is None:
        return
    _state.main_told = True
    if signal.getsignal(signal.SIGTERM) is not _handle:  # the program's own handler:
        _exit_now()  # SIGTERM again would not raise SystemExit there
    _state.raise_in_main = True
    signal.pthread_kill(main.ident, signal.SIGTERM)


def _exit_if_still_here(token: object) -> None:
    threading.Event().wait(EXIT_FALLBACK_SECONDS)
    if _state.leaving is not token:  # a test forgot this SIGTERM
        return
    logger.warning("SIGTERM: the process was still here %g s after SystemExit(%d) (caught "
                   "by a framework, or a thread that does not end?); ending the process now",
                   EXIT_FALLBACK_SECONDS, exit_status())
    _exit_now()


def _at_exit() -> None:
    """The last ``atexit`` callback of the program's (registered when podcode is imported,
    before the program's own): after SIGTERM ended a task off the main thread, the status
    is 143, not what the main thread's way out gave."""
    if _state.leaving is not None and _state.status_ours:
        _exit_now()


atexit.register(_at_exit)


def _exit_now() -> NoReturn:
    """Buffered output flushed, logging's handlers flushed and closed, exit 143."""
    with contextlib.suppress(Exception):
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    os._exit(exit_status())


def hook_name(hook: Callable[[], object]) -> str:
    module = getattr(hook, "__module__", None) or ""
    qualname = getattr(hook, "__qualname__", None) or repr(hook)
    return f"{module}.{qualname}" if module else qualname
