"""``async def`` tasks: the same session, waited for without blocking the event loop.

Everything that blocks (opening the session: capture, code-server, records; waiting for
the engineer's command; saving the fix; closing) runs on a thread of its own, never on
the loop's shared pool, which a few waiting sessions would fill. What must happen in
step with the program runs on the loop: the patch (no other coroutine runs while the
code changes) and the resumed call, awaited where the task was awaited. Each failing
coroutine gets its own session; the others go on. Cancelling the awaiting task ends
its session: the edits are saved first, then ``CancelledError`` goes on up.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from interactive.base.context import current_task
from interactive.base.phases import CommandKind, Phase
from interactive.base.settings import Settings
from interactive.base.threads import in_thread
from interactive.base.types import NEVER_DEBUGGED, ExcInfo, TaskRef
from interactive.session import postmortem
from interactive.task import preempt, runner
from interactive.task.runner import Call
from interactive.task.warmup import settle

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
    """The enabled path of a decorated coroutine function (see :func:`runner.run_task`)."""
    token, flight = current_task.set(ref.name), preempt.entering()
    try:
        call = runner.first_call(fn, ref, settings, args, kwargs)
        if settings.cache:
            cached, hit, value = await _off_loop(runner.CachedCall.look_up, call)
            if hit:
                return value
            result = await _attempt(call)
            await _off_loop(cached.store, result)
            return result
        result = await _attempt(call)
        runner._leave_if_preempted(call)
        return result
    finally:
        preempt.leaving(flight)
        current_task.reset(token)


async def _attempt(call: Call) -> Any:
    if call.settings.mode == "startup":
        return await _session(call, None)
    try:
        if call.settings.retries:
            from interactive.task.retry import await_with_retries

            return await await_with_retries(call.fn, call.args, call.kwargs, call.settings.retries)
        return await call.fn(*call.args, **call.kwargs)
    except NEVER_DEBUGGED:
        raise
    except BaseException:
        excinfo: ExcInfo = sys.exc_info()  # type: ignore[assignment]
    runner._leave_if_preempted(call)
    return await _session(call, excinfo)


async def _session(call: Call, excinfo: ExcInfo | None) -> Any:
    """:func:`runner.debug_session`, awaited."""
    await _off_loop(settle)
    session = await _off_loop(runner.new_session, call, excinfo)  # its imports: off the loop
    unregister = runner.on_sigterm(session)
    final = Phase.FAILED
    try:
        try:
            try:
                await _off_loop(session.open, excinfo, call.fn, call.args, call.kwargs,
                                call.snapshot)
            except Exception as exc:
                outcome = runner._without_session(call, excinfo, exc)  # startup: a coroutine
                return await outcome if inspect.isawaitable(outcome) else outcome
            await _off_loop(runner._sync_checkpoints, call.ref)
            value = await _serve(call, session, excinfo)
        except asyncio.CancelledError:  # while it opened or waited
            url = await _off_loop(session.save_edits)
            log.warning("%s was cancelled while its session waited%s", session.task.name,
                        f"; your edits are saved in {url}" if url else "")
            raise
        final = Phase.DONE
        return value
    finally:
        unregister()
        await _off_loop(session.close, final)
        preempt.exit_soon()  # after SIGTERM: SystemExit may be caught above us


async def _serve(call: Call, session: Session, excinfo: ExcInfo | None) -> Any:
    """Wait for commands (off the loop); the resumed coroutine's value once it succeeds."""
    while True:
        planned = runner.resumed_with(call, session, await _wait(session), excinfo)
        try:
            args, kwargs = runner.resume_inputs(call, session, planned)
            value = await call.fn(*args, **kwargs)
        except NEVER_DEBUGGED:
            raise
        except BaseException:
            excinfo = runner.failed_again(call, session)
            continue
        await _off_loop(session.deliver_fix)
        return value


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

