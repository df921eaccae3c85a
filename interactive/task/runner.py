"""Run a decorated task: cache, retries, and the debug session when it fails."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from interactive.base.context import current_task
from interactive.base.errors import InputsError, Reaped, add_note, from_the_task
from interactive.base.phases import CommandKind, Phase
from interactive.base.settings import Settings, podcode_home, workspace_for
from interactive.base.steps import Blocking, Leave, Steps, TaskCall, Wait
from interactive.base.types import NEVER_DEBUGGED, ExcInfo, TaskRef
from interactive.distributed import collective
from interactive.inputs import snapshot
from interactive.inputs.capture import MISSING, load_each
from interactive.task import preempt, steps
from interactive.task.warmup import settle, warm_up

if TYPE_CHECKING:
    from interactive.ray.train_group import Ranks
    from interactive.resume.plan import Resume
    from interactive.session.core import Command, Session
    from interactive.storage.outputs import TaskCache

log = logging.getLogger(__name__)

_prepared = False


@dataclass(slots=True)
class Call:
    """One call of a decorated task (made at every call: slotted, not frozen, which would
    cost 2 us more)."""

    fn: Callable[..., Any]
    ref: TaskRef
    settings: Settings
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    snapshot: snapshot.CallSnapshot | None = None
    """The arguments as they were at the call (None: nothing to keep)."""


def run_task(
    fn: Callable[..., Any],
    ref: TaskRef,
    settings: Settings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The enabled path. A successful call without cache or retries costs a few microseconds:
    arguments that the task could change in place are snapshotted
    (:mod:`interactive.inputs.snapshot`), nothing is written until the task fails."""
    token, flight = current_task.set(ref.name), preempt.entering()
    try:
        return steps.run(call_steps(first_call(fn, ref, settings, args, kwargs)))
    finally:
        preempt.leaving(flight)
        current_task.reset(token)


def call_steps(call: Call) -> Steps:
    """A decorated call's steps (:mod:`interactive.task.steps`): the cache, the task, and
    its session when it fails; the task's value."""
    if call.settings.cache:
        cached, hit, value = yield Blocking(CachedCall.look_up, (call,))
        if hit:
            return value
        result = yield from attempt(call)
        yield Blocking(cached.store, (result,))
        return result
    result = yield from attempt(call)
    _leave_if_preempted(call)
    return result


def first_call(
    fn: Callable[..., Any],
    ref: TaskRef,
    settings: Settings,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Call:
    """The call, its arguments kept as they are now; the process prepared at its first
    decorated call in the main thread (SIGTERM handled, imports warmed, ranks joined)."""
    global _prepared
    if not _prepared and threading.current_thread() is threading.main_thread():
        _prepared = True
        preempt.install_ahead()
        warm_up()
        _join_pod()
    if "ray" in sys.modules:  # a Ray worker runs the job's copy of the code
        from interactive.ray.worker import adapt

        ref, settings = adapt(fn, ref, settings)
    return Call(fn, ref, settings, args, kwargs, _snapshot(settings, args, kwargs))


def _snapshot(
    settings: Settings, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> snapshot.CallSnapshot | None:
    if settings.snapshot_inputs != "call" or settings.mode == "startup":
        return None  # startup: the session captures them before the task runs
    return snapshot.take(args, kwargs, settings.max_snapshot_bytes)


def _join_pod() -> None:
    """A rank of a distributed job tells the pod's other ranks it runs (once)."""
    from interactive.distributed import peers, ranks

    collective.note_call()  # a group formed before the task is re-formed by podcode on resume
    try:
        info = ranks.detect()
    except Exception as exc:  # the launcher's variables, not the user's: say it, go on
        log.warning("cannot tell this process's rank (%s); it is treated as a single one", exc)
        return
    if info.distributed:
        try:
            peers.join(podcode_home(), info)
        except OSError:
            log.exception("%s: cannot record this rank for its peers", info.label)


@dataclass(frozen=True)
class CachedCall:
    """A call whose output is cached (``cache=True``): looked up, then stored."""

    call: Call
    cache: TaskCache
    inputs: str

    @classmethod
    def look_up(cls, call: Call) -> tuple[CachedCall, bool, Any]:
        """(the cached call, whether its output is in the store, that output)."""
        from interactive.storage.backends import open_store
        from interactive.storage.outputs import TaskCache

        cache = TaskCache(open_store())
        cached = cls(call, cache, cache.inputs_digest(call.args, call.kwargs, func=call.fn))
        hit, value = cache.get(cached.key())
        if hit:
            log.info("%s: cached output reused (cache_version %s)", call.ref.name,
                     call.settings.cache_version)
        return cached, hit, value

    def key(self) -> str:
        """Under the code as it is now: after a resume, the engineer's fixed code."""
        version = self.call.settings.cache_version
        return self.cache.key(self.call.ref.name, version, (), {}, func=self.call.fn,
                              inputs=self.inputs)

    def store(self, result: Any) -> None:
        _leave_if_preempted(self.call)
        self.cache.put(self.key(), result)


def attempt(call: Call) -> Steps:
    """The task called (retried as set), and its session when it fails."""
    if call.settings.mode == "startup":
        return (yield from session_steps(call, None))
    try:
        return (yield TaskCall(call.fn, call.args, call.kwargs, call.settings.retries))
    except NEVER_DEBUGGED:
        raise
    except BaseException:
        excinfo = current_failure()
    _leave_if_preempted(call)  # the pod is going: no session, checkpoint and go
    if "ray" in sys.modules:
        from interactive.ray import bugs, worker

        if worker.in_worker():  # one session per bug across the job
            again = bugs.FailedCall(call.fn, call.args, call.kwargs, call.ref, call.settings,
                               preempt.check_alive, _ranks())
            return (yield from bugs.handle(again, excinfo, functools.partial(
                session_steps, call)))
    return (yield from session_steps(call, excinfo))


def _ranks() -> Ranks | None:
    """A Ray worker that is one rank of a process group (Ray Train's workers): what the
    bug board does to its group; None for any other task."""
    if not collective.in_group():
        return None
    from interactive.distributed import peers
    from interactive.ray.train_group import Ranks, group_name

    _join_pod()
    return Ranks(group_name(), collective.abort_group, collective.reform_group,
                 peers.broke_with_the_group, peers.set_in_session)


def current_failure() -> ExcInfo:
    """The exception being handled, for the session: a plain function's traceback starts at
    the task's own frame, so that the debugger lists that frame's callers from the live
    stack (a traceback that starts in a suspended generator of the runner's steps shows
    none of them). A coroutine's is left as it is: its callers are the event loop's."""
    kind, error, tb = sys.exc_info()
    if kind is None or error is None:
        raise RuntimeError("current_failure() is called only while an exception is handled")
    task = from_the_task(tb)
    if task is not None and task.tb_frame.f_code.co_flags & inspect.CO_COROUTINE:
        return kind, error, tb
    return kind, error, task


def _sync_checkpoints(ref: TaskRef) -> None:
    from interactive.storage.checkpoint import sync_checkpoints

    try:
        sync_checkpoints(ref.name)
    except Exception:
        log.exception("checkpoints of %s could not be synced to the store", ref.name)


def _leave_if_preempted(call: Call) -> None:
    """After SIGTERM (nothing before): see :func:`_leave`."""
    if not preempt.check_alive():
        _leave(call)


def _leave(call: Call, edits: Callable[[], object] | None = None) -> NoReturn:
    """The pod is going: on_preempt hooks (bounded), edits and checkpoints saved, exit 143."""

    def save() -> None:
        if edits is not None:
            edits()
        _sync_checkpoints(call.ref)

    on_preempt = call.settings.hooks.on_preempt
    hooks = [on_preempt] if on_preempt is not None else []
    preempt.leave(hooks, call.settings.hooks.preempt_grace_seconds, after=save,
                  then_end=edits is None)  # a session ends the process once it is closed


def _inputs(call: Call, session: Session) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The inputs as captured (as they were at the call, unless the session said
    otherwise), each set back into the caller's own object where its type allows; an
    argument that was not saved (the session named it) is passed as the task left it."""
    if session.capture is None:
        return call.args, call.kwargs
    try:
        args, kwargs = load_each(session.capture.folder)
    except InputsError:
        log.exception("captured inputs unreadable; resuming with the objects in memory")
        return call.args, call.kwargs
    return (
        tuple(_restored(live, saved) for live, saved in zip(call.args, args, strict=False)),
        {name: _restored(live, kwargs.get(name, MISSING)) for name, live in call.kwargs.items()},
    )


def _restored(live: Any, saved: Any) -> Any:
    return live if saved is MISSING else snapshot.restore(live, saved)


def session_steps(
    call: Call, excinfo: ExcInfo | None, on_open: Callable[[Session], object] | None = None,
    on_resume: Callable[[bool], object] | None = None,
) -> Steps:
    """Open a session and serve it until the task succeeds, or abort/reap/preemption;
    ``on_open(session)`` once it is open, ``on_resume(patched)`` at each resume once the
    engineer's edits are patched in (``patched``: some code changed), before the process
    group is re-formed and the task is called again."""
    refused = yield Blocking(_ready_for_session, (excinfo,))
    if refused is not None:
        return (yield from without_session(call, excinfo, refused))
    session = yield Blocking(new_session, (call, excinfo))  # its imports: off a loop
    unregister = on_sigterm(session)
    final = Phase.FAILED
    try:
        try:
            yield Blocking(session.open, (excinfo, call.fn, call.args, call.kwargs,
                                          call.snapshot))
        except Exception as exc:
            return (yield from without_session(call, excinfo, exc))
        if on_open is not None:
            yield Blocking(on_open, (session,))
        yield Blocking(_sync_checkpoints, (call.ref,))  # a retry in a new pod finds the last
        value = yield from _serve(call, session, excinfo, on_resume)
        final = Phase.DONE
        return value
    except (KeyboardInterrupt, asyncio.CancelledError) as stop:  # Ctrl-C, ray.cancel, a
        # cancelled coroutine: at any moment once the session waits
        url = yield Blocking(session.save_edits)
        log.warning("%s was %s while its session waited%s", call.ref.name,
                    "cancelled" if isinstance(stop, asyncio.CancelledError) else "interrupted",
                    f"; your edits are saved in {url}" if url else "")
        raise
    finally:
        unregister()
        yield Blocking(session.close, (final,))
        yield Leave()


def _ready_for_session(excinfo: ExcInfo | None) -> Exception | None:
    """Imports settled; why no session may open on this thread (None: it may): a plain
    function's session on a running event loop would freeze the loop."""
    settle()
    if excinfo is not None and _loop_running():
        return RuntimeError(ON_LOOP)
    return None


ON_LOOP = (
    "the task is a plain function called on a running event loop, which its session would "
    "freeze: put @vscode on the async def that calls it (or run it with asyncio.to_thread)"
)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def new_session(call: Call, excinfo: ExcInfo | None) -> Session:
    """The session for ``call`` (not open yet); the failure's traceback logged first."""
    from interactive.session.core import Session

    ref = call.ref
    if excinfo is not None:
        log.error(  # the traceback first: nothing the session does can lose it
            "%s failed (%s: %s); opening a debug session", ref.name, excinfo[0].__name__,
            excinfo[1], exc_info=excinfo,
        )
        collective.abort_group(excinfo[1])  # peers blocked on this rank fail now, not in 30 min
    return Session(ref, call.settings, workspace_for(ref, call.settings))


def on_sigterm(session: Session) -> Callable[[], None]:
    """SIGTERM wakes the waiting call (from the handler: a queue put); the unregistering
    function."""
    from interactive.session.core import Command

    command = Command(CommandKind.PREEMPTED)
    return preempt.on_terminate(lambda: session.commands.put(command))


def _serve(
    call: Call, session: Session, excinfo: ExcInfo | None,
    on_resume: Callable[[bool], object] | None,
) -> Steps:
    """Wait for commands; the resumed task's value once it succeeds. Every step that may
    block (the record written, the inputs loaded, the ranks joined) is :class:`Blocking`;
    only the patch itself runs where the task runs (for a coroutine: on its loop)."""
    while True:
        planned = resumed_with(call, session, (yield Wait(session)), excinfo)
        again: ExcInfo | None = None
        try:
            args, kwargs = yield from resume_inputs(call, session, planned)
            if on_resume is not None:  # before the group re-forms: ranks waiting elsewhere
                patched = planned is not None and bool(planned.plan.patched)  # join it then
                yield Blocking(on_resume, (patched,))
            yield Blocking(collective.reform_group)  # with the other ranks, which resume too
            value = yield TaskCall(call.fn, args, kwargs)
        except NEVER_DEBUGGED:
            raise
        except BaseException:
            again = current_failure()
        if again is not None:
            excinfo = again
            yield from failed_again(call, session, again)
            continue
        yield Blocking(session.deliver_fix)
        return value


def resumed_with(
    call: Call, session: Session, command: Command, excinfo: ExcInfo | None
) -> Resume | None:
    """What a command means for the waiting call: RESUME gives its plan (None: no code
    changed); abort, cleanup and preemption end the call here."""
    match command.kind:
        case CommandKind.RESUME:
            planned: Resume | None = command.detail
            return planned
        case CommandKind.ABORT:
            _raise_original(excinfo, call.ref)
        case CommandKind.REAPED:
            cause = excinfo[1] if excinfo else None
            raise Reaped(
                f"{call.ref.name}: session cleaned up after being idle", command.detail
            ) from cause
        case CommandKind.PREEMPTED:
            _leave(call, session.save_edits)
    raise AssertionError(f"unknown command {command.kind}")


def failed_again(call: Call, session: Session, excinfo: ExcInfo) -> Steps:
    """The resumed task failed (``excinfo``): the session shows the new exception and
    waits again."""
    log.error("%s failed again (%s); the session stays open", call.ref.name, excinfo[1])
    yield Blocking(collective.abort_group, (excinfo[1],))
    yield Blocking(session.reopen, (excinfo,))


def without_session(call: Call, excinfo: ExcInfo | None, problem: Exception) -> Steps:
    """podcode could not open the session: the task's own outcome, and one line why."""
    why = f"podcode could not open a debug session for {call.ref.name}: {problem}"
    if excinfo is None:  # mode="startup": no failure to show, run the task as it is
        log.warning("%s; the task runs without one", why)
        return (yield TaskCall(call.fn, call.args, call.kwargs))
    log.error("%s", why)
    add_note(excinfo[1], why)
    raise excinfo[1].with_traceback(from_the_task(excinfo[2]))


def resume_inputs(call: Call, session: Session, planned: Resume | None) -> Steps:
    """Patch the edits in; the inputs to call the task with again. The patch runs where the
    task runs (on a coroutine's loop no other coroutine runs while the code changes); the
    record and the inputs are :class:`Blocking` steps."""
    yield Blocking(session.running)
    summary = "nothing patched (no code changed)"
    if planned is not None:
        planned.plan.apply()
        session.patched(planned)
        summary = planned.plan.summary()
    args, kwargs = yield Blocking(_inputs, (call, session))  # after the patch: new code
    print(
        f"podcode: resuming {call.ref.name} (attempt {session.state.attempt + 1}): {summary}",
        flush=True,
    )
    return args, kwargs


def _raise_original(excinfo: ExcInfo | None, ref: TaskRef) -> NoReturn:
    if excinfo is None:
        raise RuntimeError(f"{ref.name}: session aborted before the task ran")
    raise excinfo[1].with_traceback(from_the_task(excinfo[2]))
