"""One session per bug across a Ray job.

A bug hit by a hundred map tasks must not open a hundred sessions, each holding a
worker slot (and its GPU). The first task that fails at a place claims the bug on a
board that the whole job shares (a detached Ray actor, one per job, no CPU); its
session opens as usual. Tasks failing the same way meanwhile wait for that session's
outcome instead of opening their own, with their traceback's frames cleared (the
tensors they held are freed):

- resumed and returned: the engineer's edits are applied in each waiting task too
  (the same patch, planned against its own copy of the code) and each is called again
  with its own inputs; a task that fails the same way later, in a fresh worker, gets
  the fix at once;
- aborted, cleaned up or gone: each raises its own exception, and Ray's retry policy
  applies as for any failure.

A task that still fails after the fix claims the bug again: a new session opens.

Ray Train's workers are ranks of one process group: they go through the board too, with
what a group needs (:mod:`interactive.ray.train_group`).

The fix is posted to the board when the engineer resumes (once the edits are patched
in), not when the decorated function returns: Ray Tune may stop a trial at its last
report, and its function never returns. The session's owner beats while the bug is
open (:data:`HEARTBEAT_SECONDS`); a bug whose owner has not beaten for
:data:`OWNER_TIMEOUT_SECONDS` (its worker was killed, its node lost) is taken over by
the next task that asks about it, which opens its own session. The board is detached,
holds no resources and is scheduled outside any placement group, so a trial's end
(and its placement group's removal) does not take it along.

Sessions are bounded: at most ``ray_max_sessions`` open at once in a job and
``ray_max_sessions_per_node`` on one node (0: no bound). A task whose new bug finds the
bound reached opens none: it raises its exception, with a note that says why, and Ray's
retry policy applies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interactive.base.errors import add_note, from_the_task
from interactive.base.settings import Settings, workspace_for
from interactive.base.steps import Blocking, Steps, TaskCall
from interactive.base.types import NEVER_DEBUGGED, ExcInfo, TaskRef
from interactive.ray.train_group import Ranks, bug_of

log = logging.getLogger(__name__)

OPEN, WAIT, FIXED, FAILED, FULL = "open", "wait", "fixed", "failed", "full"
Edits = list[tuple[str, str, str]]
"""``(path relative to the workspace, text before, text after)`` of each edited file."""
BOARD = "podcode-bugs-{job}"
NAMESPACE = "podcode"
POLL_SECONDS = 2.0
HEARTBEAT_SECONDS = 1.0
"""How often a bug's owner tells the board it is alive."""
OWNER_TIMEOUT_SECONDS = 8.0
"""A bug whose owner has not beaten for this long is free (a process busy pickling a large
capture can hold the GIL for a second or two, a loaded cluster delays messages: several
beats' margin, since a live owner taken for dead means a second session for its bug)."""


@dataclass(frozen=True)
class FailedCall:
    """What calling the failed task again takes."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    ref: TaskRef
    settings: Settings
    alive: Callable[[], bool]
    """False once the process is told to stop (SIGTERM): waiting ends."""
    ranks: Ranks | None = None
    """The task is one rank of a process group (Ray Train's workers)."""

    @property
    def workspace(self) -> Path:
        return workspace_for(self.ref, self.settings)


OpenSession = Callable[..., Steps]
"""``open_session(excinfo, on_open=None, on_resume=None)``: the steps of the task's own
session for a failure (``on_open(session)`` once it is open, ``on_resume(patched)`` at
each resume, once the edits are patched in); their value is the task's, once resumed."""


def bug_key(task: str, excinfo: ExcInfo) -> str:
    """The same bug: the same task, the same exception type, raised at the same line."""
    kind, _, tb = excinfo
    frames = traceback.extract_tb(tb)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{task} {kind.__module__}.{kind.__qualname__} at {where}"


@dataclass
class Bug:
    """What the board knows of one bug."""

    state: str
    owner: str
    detail: Any = None
    node: str = ""
    beat: float = field(default_factory=time.monotonic)
    """When the owner last said it is alive (the board's clock)."""
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: set[str] = field(default_factory=set)
    """Who waits for the open session's outcome."""
    rounds: int = 0
    """How many outcomes its session posted (a rank's session posts one at every resume)."""


class Board:
    """The job's bugs (the body of the board actor; plain, to be tested without Ray)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.bugs: dict[str, Bug] = {}
        self.groups: dict[str, str] = {}
        """Process group -> the bug whose session broke it (Ray Train's ranks)."""
        self.opened = 0
        self.clock = clock

    def claim(self, key: str, who: str, again: bool = False, node: str = "",
              limits: tuple[int, int] = (0, 0)) -> tuple[str, Any]:
        """``(OPEN, None)``: open the session; ``(WAIT, owner)``; ``(FULL, why)``: the
        bounds on open sessions (``limits``: in the job, on ``node``; 0 is none) are
        reached; or the outcome so far. ``again``: the fix did not help this task: a new
        session opens. A bug whose owner is gone is this caller's to open."""
        bug = self.bugs.get(key)
        if bug is None or (again and bug.state != OPEN) or self._orphaned(bug):
            full = self.full(node, limits, besides=key)
            if full is not None:
                return FULL, full
            self.bugs[key] = Bug(OPEN, who, node=node, beat=self.clock(),
                                 waiting=bug.waiting - {who} if bug is not None else set())
            self.opened += 1
            return OPEN, None
        if bug.state == OPEN:
            bug.waiting.add(who)
            return WAIT, bug.owner
        return bug.state, bug.detail

    def heartbeat(self, key: str, who: str) -> int:
        """The owner of ``key`` is alive; how many tasks wait for its session."""
        bug = self.bugs.get(key)
        if bug is None or bug.owner != who:
            return 0
        bug.beat = self.clock()  # a rank's session beats on after a round (see latest)
        return len(bug.waiting) if bug.state == OPEN else 0

    def waiters(self, key: str) -> int:
        """How many tasks wait for the open session of ``key`` (0 once it is settled)."""
        bug = self.bugs.get(key)
        return len(bug.waiting) if bug is not None and bug.state == OPEN else 0

    def _orphaned(self, bug: Bug) -> bool:
        """An open bug whose owner stopped beating (its worker died)."""
        return bug.state == OPEN and self.clock() - bug.beat > OWNER_TIMEOUT_SECONDS

    def full(self, node: str, limits: tuple[int, int], besides: str = "") -> str | None:
        """Why no session may open now (a bound is reached), or None. Sessions whose owner
        is gone do not count, nor the bug ``besides`` (being taken over)."""
        in_job, on_node = limits
        open_ = [bug for key, bug in self.bugs.items()
                 if bug.state == OPEN and key != besides and not self._orphaned(bug)]
        if in_job and len(open_) >= in_job:
            return f"{len(open_)} sessions are open in this job (ray_max_sessions={in_job})"
        here = [bug for bug in open_ if bug.node == node]
        if on_node and len(here) >= on_node:
            return (f"{len(here)} sessions are open on this node "
                    f"(ray_max_sessions_per_node={on_node})")
        return None

    def settle(self, key: str, state: str, detail: Any, who: str = "") -> None:
        """The outcome of the open session of ``key``; ``who``, its owner, posts again
        (a rank's session posts at every resume: the group runs again whole)."""
        bug = self.bugs.get(key)
        if bug is None or not (bug.state == OPEN or who and who == bug.owner):
            return
        bug.state, bug.detail = state, detail
        bug.rounds += 1
        bug.settled.set()

    def latest(self, key: str) -> tuple[int, str, Any, bool]:
        """``(rounds, state, detail, gone)`` of ``key``: how many outcomes its session
        posted, the last one, and whether its owner stopped beating."""
        bug = self.bugs.get(key)
        if bug is None:
            return 0, WAIT, None, False
        gone = self.clock() - bug.beat > OWNER_TIMEOUT_SECONDS
        return bug.rounds, bug.state, bug.detail, gone

    async def outcome(self, key: str, timeout: float, who: str = "",
                      limits: tuple[int, int] = (0, 0), node: str = "") -> tuple[str, Any]:
        """The bug's outcome once settled (``(WAIT, owner)`` after ``timeout`` seconds);
        ``(OPEN, None)`` when its owner is gone and ``who`` takes the session over."""
        bug = self.bugs[key]
        try:
            await asyncio.wait_for(bug.settled.wait(), timeout)
        except asyncio.TimeoutError:
            if who and self._orphaned(bug):
                return self.claim(key, who, node=node, limits=limits)
            return WAIT, bug.owner
        return bug.state, bug.detail

    def broke(self, group: str, key: str) -> None:
        """The session of ``key`` breaks the process group ``group``."""
        self.groups[group] = key

    def breaker(self, group: str) -> str | None:
        """The bug whose session broke ``group`` last (None: none did)."""
        return self.groups.get(group)

    def live(self) -> bool:
        """Whether a session is open with its owner alive."""
        return any(bug.state == OPEN and not self._orphaned(bug) for bug in self.bugs.values())


class BoardActor(Board):
    """The board as a Ray actor: it ends itself after an idle hour with no bug open (it is
    detached, so that a worker's exit does not take it along)."""

    IDLE_EXIT_SECONDS = 3600.0

    def __init__(self) -> None:
        super().__init__()
        self.touched = time.monotonic()
        self.expiring: asyncio.Task[None] | None = None

    async def claim_async(self, key: str, who: str, again: bool = False, node: str = "",
                          limits: tuple[int, int] = (0, 0)) -> tuple[str, Any]:
        self.touched = time.monotonic()
        if self.expiring is None:
            self.expiring = asyncio.get_running_loop().create_task(self._expire())
        return self.claim(key, who, again, node, limits)

    async def _expire(self) -> None:
        import ray

        while True:
            await asyncio.sleep(60)
            idle = time.monotonic() - self.touched > self.IDLE_EXIT_SECONDS
            if idle and not self.live():
                ray.actor.exit_actor()  # type: ignore[no-untyped-call]


def board() -> Any:
    """The job's board actor (made by the first task that needs it), outside any placement
    group: created from a trial, it must outlive the trial's group."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    job = ray.get_runtime_context().get_job_id()
    remote: Any = ray.remote
    actor = remote(num_cpus=0, max_concurrency=1000)(BoardActor)
    return actor.options(
        name=BOARD.format(job=job), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True,
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=None),  # type: ignore[arg-type]  # Ray's documented way out
    ).remote()


def who() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


def handle(call: FailedCall, excinfo: ExcInfo, open_session: OpenSession) -> Steps:
    """The failed ``call`` in a Ray worker: its own session, or the outcome of the one
    already open for the same bug. Whatever goes wrong on the way (the board out of reach,
    a fix that cannot be applied here), the task's own exception is raised, with a note."""
    key = bug_key(call.ref.name, excinfo)
    try:
        shared = yield Blocking(board)
        if call.ranks is not None:  # stopped by the group breaking: the breaker's bug
            key = yield Blocking(bug_of, (call.ranks, shared, key, excinfo))
        verdict, detail = yield Blocking(_ask, (shared.claim_async, key, who(), False,
                                                *_where(call)))
        if verdict == OPEN and call.ranks is not None:  # named before its session breaks it
            yield Blocking(_ask, (shared.broke, call.ranks.group, key))
    except Exception as exc:  # no board: this task's own session, as without Ray
        log.warning("the job's bug board is out of reach (%s): a session of its own", exc)
        return (yield from open_session(excinfo))
    if call.ranks is not None and verdict != OPEN:  # its peers must not wait on it
        yield Blocking(call.ranks.abort, (excinfo[1],))  # (a session breaks it as it opens)
    if verdict == WAIT:
        _release(excinfo)
        print(f"podcode: {key}: a session is open for this bug ({detail}); this task waits "
              "for its outcome and holds no session of its own", flush=True)
        idle = call.settings.idle  # the open session is cleaned up by then at the latest
        verdict, detail = yield Blocking(_wait, (shared, key, call, idle.max_idle_seconds
                                                 + idle.grace_seconds))
    if verdict == FIXED and call.ranks is not None:  # a round this rank did not run yet
        verdict, detail = yield Blocking(_new_round, (shared, key, call))
    if verdict == OPEN:
        return (yield from _own_session(call, excinfo, open_session, shared, key))
    if verdict == FIXED:
        return (yield from _with_fix(call, excinfo, detail, open_session, shared, key))
    if verdict == FULL:
        print(f"podcode: {key}: no session opens for this task: {detail}", flush=True)
        add_note(excinfo[1], f"podcode: no debug session opened: {detail}")
    else:
        why = "no outcome in time" if verdict == WAIT else detail
        print(f"podcode: {key}: the session for this bug ended without a fix ({why}); this "
              "task raises its own exception and opens none", flush=True)
        add_note(excinfo[1], f"podcode: the session for this bug ended without a fix ({why})")
    raise excinfo[1].with_traceback(excinfo[2])


def _ask(method: Any, *args: Any) -> Any:
    """One call of the board actor, answered (``ray.get``)."""
    import ray

    return ray.get(method.remote(*args))


def _where(call: FailedCall) -> tuple[str, tuple[int, int]]:
    """This worker's node, and the bounds on open sessions the task's settings set."""
    import ray

    ray_settings = call.settings.ray
    return ray.get_runtime_context().get_node_id(), (
        ray_settings.ray_max_sessions, ray_settings.ray_max_sessions_per_node)


def _own_session(
    call: FailedCall, excinfo: ExcInfo, open_session: OpenSession, shared: Any, key: str
) -> Steps:
    """This task's session for the bug: its owner beats until it ends; the fix is posted
    when the engineer resumes, a failure when the session ends without one."""

    from interactive.ray.waiters import OwnerWatch
    from interactive.storage.workspace import Snapshot

    base = yield Blocking(Snapshot.take, (call.workspace,))
    watch = OwnerWatch(_Beats(shared, key, who()), HEARTBEAT_SECONDS)

    def resumed(patched: bool) -> None:
        # A resume that patched nothing is no fix to hand on, but ranks run again together.
        if patched or call.ranks is not None:
            shared.settle.remote(key, FIXED, edits(base), _poster(call))  # the waiters take it

    watch.start()
    try:
        return (yield from open_session(excinfo, on_open=watch.attach, on_resume=resumed))
    except BaseException as exc:
        shared.settle.remote(key, FAILED, f"{type(exc).__name__}: {exc}", _poster(call))
        raise
    finally:
        watch.stop()


def _poster(call: FailedCall) -> str:
    """Who posts the session's outcomes: a rank's session posts one at every resume."""
    return who() if call.ranks is not None else ""


_taken: dict[str, int] = {}
"""Bug -> the round of its session's outcomes this process last ran (ranks only)."""
ROUND_POLL_SECONDS = 0.5


def _new_round(shared: Any, key: str, call: FailedCall) -> tuple[str, Any]:
    """A rank's next outcome of the bug's session: the one posted since the round this
    process ran; ``(OPEN, None)`` once it takes the bug over (the session ended with no
    new outcome), or a new owner's ``(WAIT, owner)``."""
    import ray

    idle = call.settings.idle
    deadline = time.monotonic() + idle.max_idle_seconds + idle.grace_seconds
    while call.alive() and time.monotonic() < deadline:
        rounds, state, detail, gone = ray.get(shared.latest.remote(key))
        if rounds > _taken.get(key, 0):
            _taken[key] = rounds
            return state, detail
        if gone:
            verdict: tuple[str, Any] = _ask(shared.claim_async, key, who(), True, *_where(call))
            return verdict
        time.sleep(ROUND_POLL_SECONDS)
    return WAIT, None


class _Beats:
    """Tells the board the owner is alive without waiting for its answer (a busy board or
    cluster never delays the next beat); each call gives the waiters counted by the last
    beat answered."""

    def __init__(self, shared: Any, key: str, me: str) -> None:
        self.shared, self.key, self.me = shared, key, me
        self.pending: Any = None
        self.count = 0

    def __call__(self) -> int:
        import ray

        if self.pending is not None and ray.wait([self.pending], timeout=0)[0]:
            self.count, self.pending = int(ray.get(self.pending)), None
        sent = self.shared.heartbeat.remote(self.key, self.me)
        self.pending = self.pending or sent
        return self.count


def edits(base: Any) -> Edits:
    from interactive.resume.plan import edits_since

    return [(str(path.relative_to(base.root)), old, new) for path, old, new in edits_since(base)]


def _wait(shared: Any, key: str, call: FailedCall, limit: float) -> tuple[str, Any]:
    """Wait for the bug's outcome, at most ``limit`` seconds, while the process is alive;
    ``(OPEN, None)`` when this task takes over the session of an owner that is gone."""
    import ray

    deadline = time.monotonic() + limit
    verdict: tuple[str, Any] = (WAIT, None)
    node, limits = _where(call)
    if call.ranks is not None:
        call.ranks.waiting(True)
    try:
        while call.alive() and time.monotonic() < deadline:
            verdict = ray.get(shared.outcome.remote(key, POLL_SECONDS, who(), limits, node))
            if verdict[0] != WAIT:
                break
    finally:
        if call.ranks is not None:
            call.ranks.waiting(False)
    return verdict


def _with_fix(
    call: FailedCall, excinfo: ExcInfo, fix: Edits, open_session: OpenSession, shared: Any, key: str
) -> Steps:
    """Apply the bug's fix here and call the task again; failing the same way, a new
    session opens."""
    from interactive.resume.patching import plan

    root = call.workspace
    try:
        patch = plan([(root / rel, old, new) for rel, old, new in fix], [call.fn])
        _write(root, fix)
        patch.apply()
    except Exception as exc:  # the fix does not apply to this copy: the task's own error
        add_note(excinfo[1], f"podcode: the fix made in this bug's session cannot be applied "
                             f"here ({type(exc).__name__}: {exc})")
        raise excinfo[1].with_traceback(excinfo[2]) from None
    print(f"podcode: {key}: fixed in its session; this task runs again: {patch.summary()}",
          flush=True)
    if call.ranks is not None:  # with the other ranks, which resume too
        yield Blocking(call.ranks.reform)
    try:
        return (yield TaskCall(call.fn, call.args, call.kwargs))
    except NEVER_DEBUGGED:
        raise
    except BaseException as exc:
        again: ExcInfo = (type(exc), exc, from_the_task(exc.__traceback__))
    if bug_key(call.ref.name, again) != key or call.ranks is not None:  # ranks: the next
        return (yield from handle(call, again, open_session))  # round of the same session
    try:
        verdict, detail = yield Blocking(_ask, (shared.claim_async, key, who(), True,
                                                *_where(call)))
    except Exception as exc:  # the board is gone: this task's own session
        log.warning("the job's bug board is out of reach (%s): a session of its own", exc)
        return (yield from open_session(again))
    if verdict != OPEN:  # another task took the bug again first: wait on its session
        return (yield from handle(call, again, open_session))
    return (yield from _own_session(call, again, open_session, shared, key))


def _write(root: Path, fix: Edits) -> None:
    """The fixed files in this node's copy (a worker on the same node already sees them)."""
    from interactive.base.files import write_bytes

    for rel, _, new in fix:
        path = root / rel
        try:
            if path.read_text(encoding="utf-8", errors="replace") != new:
                write_bytes(path, new.encode(), path.stat().st_mode & 0o7777)
        except OSError as exc:
            log.warning("cannot write the fix to %s (%s); it runs patched in memory", path, exc)


def _release(excinfo: ExcInfo) -> None:
    """A waiting task holds no frames (their tensors free the GPU memory they took)."""
    traceback.clear_frames(excinfo[2])
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
