"""``async def`` tasks: the same steps as a plain function's, run on the event loop.

A coroutine's call goes through :func:`interactive.task.runner.call_steps`, as a plain
function's does (the cache, retries, the Ray job's bug board, ``on_open``, interrupts);
:func:`run` is its executor. Everything that blocks (opening the session: capture,
code-server, records; ``on_open``; waiting for the engineer's command; at a resume the
record written, the captured inputs loaded, the process group re-formed; reopening
after a new failure; saving the fix; closing) is a :class:`Blocking` step and runs on a
thread of its own, never on the loop's shared pool, which a few waiting sessions would
fill. What must happen in step with the program runs on the loop: the patch (no other
coroutine runs while the code changes) and the resumed call, awaited where the task
was awaited. Each failing coroutine gets its own session; the others go
on. Cancelling the awaiting task ends its session: the edits are saved first, then
``CancelledError`` goes on up.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from interactive.base.context import current_task
from interactive.base.phases import CommandKind
from interactive.base.settings import Settings
from interactive.base.steps import Blocking, Leave, Step, Steps, TaskCall, Wait
from interactive.base.threads import in_thread
from interactive.base.types import TaskRef
from interactive.session import postmortem
from interactive.task import preempt, runner
from interactive.task.steps import Done, Outcome, advance

if TYPE_CHECKING:
    from interactive.session.core import Command, Session

log = logging.getLogger(__name__)
T = TypeVar("T")


async def run_task_async(
    fn: Callable[..., Any],
    ref: TaskRef,
    settings: Settings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The enabled path of a decorated coroutine function: the same steps as a plain
    function's (:func:`runner.call_steps`), run on the event loop by :func:`run`."""
    token, flight = current_task.set(ref.name), preempt.entering()
    try:
        return await run(runner.call_steps(runner.first_call(fn, ref, settings, args, kwargs)))
    finally:
        preempt.leaving(flight)
        current_task.reset(token)


async def run(steps: Steps) -> Any:
    """Run ``steps`` (:mod:`interactive.task.steps`) on the event loop; their value."""
    outcome: Outcome = (None, None)
    while True:
        step = advance(steps, outcome)
        if isinstance(step, Done):
            return step.value
        try:
            outcome = (await _do(step), None)
        except BaseException as exc:  # noqa: BLE001 - the steps decide what it means
            outcome = (None, exc)


async def _do(step: Step) -> Any:
    match step:
        case Blocking(fn, args):
            return await _off_loop(fn, *args)
        case TaskCall(fn, args, kwargs, retries):
            if retries:
                from interactive.task.retry import await_with_retries

                return await await_with_retries(fn, args, kwargs, retries)
            return await fn(*args, **kwargs)
        case Wait(session):
            return await _wait(session)
        case Leave():
            preempt.end_process()  # after SIGTERM, the session closed: exit 143
            return None
    raise AssertionError(f"unknown step {step!r}")


async def _wait(session: Session) -> Command:
    """The next command, waited for on a thread of its own."""
    from interactive.session.core import Command

    waiting = in_thread(session.wait, "session-wait")
    try:
        with _loop_out_of_sight():
            return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        session.commands.put(Command(CommandKind.ABORT))  # the waiting thread returns
        raise


_hidden_loops: dict[threading.Thread, tuple[int, contextlib.ExitStack]] = {}


@contextlib.contextmanager
def _loop_out_of_sight() -> Iterator[None]:
    """While a session of this loop waits, the debugger neither suspends nor traces the
    loop's thread: a client stopped in a failed coroutine does not freeze the coroutines
    that go on (their breakpoints are hit again once no session of the loop waits)."""
    thread = threading.current_thread()
    count, stack = _hidden_loops.get(thread, (0, contextlib.ExitStack()))
    if count == 0:
        stack.enter_context(postmortem.out_of_sight(thread))
    _hidden_loops[thread] = (count + 1, stack)
    try:
        yield
    finally:
        count, stack = _hidden_loops.pop(thread)
        if count > 1:
            _hidden_loops[thread] = (count - 1, stack)
        else:
            stack.close()


async def _off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a thread of its own, in this task's context. A cancellation while it
    runs is passed on once it has finished (a session is never closed half-open)."""
    context = contextvars.copy_context()
    running = in_thread(lambda: fn(*args), f"session-{getattr(fn, '__name__', 'call')}",
                        context=context)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        try:
            await running
        except asyncio.CancelledError:
            pass  # cancelled again: leave it behind
        except Exception:
            log.exception("while the task was being cancelled")
        raise

