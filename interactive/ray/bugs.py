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

from interactive.base.errors import add_note
from interactive.base.settings import Settings, workspace_for
from interactive.base.types import NEVER_DEBUGGED, ExcInfo, TaskRef

log = logging.getLogger(__name__)

OPEN, WAIT, FIXED, FAILED, FULL = "open", "wait", "fixed", "failed", "full"
Edits = list[tuple[str, str, str]]
"""``(path relative to the workspace, text before, text after)`` of each edited file."""
BOARD = "podcode-bugs-{job}"
NAMESPACE = "podcode"
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Again:
    """What calling the failed task again takes."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    ref: TaskRef
    settings: Settings
    alive: Callable[[], bool]
    """False once the process is told to stop (SIGTERM): waiting ends."""

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)

    @property
    def workspace(self) -> Path:
        return workspace_for(self.ref, self.settings)


OpenSession = Callable[..., Any]
"""``open_session(excinfo, on_open=None)``: opens the task's own session for a failure
(``on_open(session)`` once it is open); the task's value once resumed."""


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
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: set[str] = field(default_factory=set)
    """Who waits for the open session's outcome."""


class Board:
    """The job's bugs (the body of the board actor; plain, to be tested without Ray)."""

    def __init__(self) -> None:
        self.bugs: dict[str, Bug] = {}
        self.opened = 0

    def claim(self, key: str, who: str, again: bool = False, node: str = "",
              limits: tuple[int, int] = (0, 0)) -> tuple[str, Any]:
        """``(OPEN, None)``: open the session; ``(WAIT, owner)``; ``(FULL, why)``: the
        bounds on open sessions (``limits``: in the job, on ``node``; 0 is none) are
        reached; or the outcome so far. ``again``: the fix did not help this task: a new
        session opens."""
        bug = self.bugs.get(key)
        if bug is None or (again and bug.state != OPEN):
            full = self.full(node, limits)
            if full is not None:
                return FULL, full
            self.bugs[key] = Bug(OPEN, who, node=node)
            self.opened += 1
            return OPEN, None
        if bug.state == OPEN:
            bug.waiting.add(who)
            return WAIT, bug.owner
        return bug.state, bug.detail

    def waiters(self, key: str) -> int:
        """How many tasks wait for the open session of ``key`` (0 once it is settled)."""
        bug = self.bugs.get(key)
        return len(bug.waiting) if bug is not None and bug.state == OPEN else 0

    def full(self, node: str, limits: tuple[int, int]) -> str | None:
        """Why no session may open now (a bound is reached), or None."""
        in_job, on_node = limits
        open_ = [bug for bug in self.bugs.values() if bug.state == OPEN]
        if in_job and len(open_) >= in_job:
            return f"{len(open_)} sessions are open in this job (ray_max_sessions={in_job})"
        here = [bug for bug in open_ if bug.node == node]
        if on_node and len(here) >= on_node:
            return (f"{len(here)} sessions are open on this node "
                    f"(ray_max_sessions_per_node={on_node})")
        return None

    def settle(self, key: str, state: str, detail: Any) -> None:
        bug = self.bugs.get(key)
        if bug is None or bug.state != OPEN:
            return
        bug.state, bug.detail = state, detail
        bug.settled.set()

    async def outcome(self, key: str, timeout: float) -> tuple[str, Any]:
        """The bug's outcome once settled (``(WAIT, owner)`` after ``timeout`` seconds)."""
        bug = self.bugs[key]
        try:
            await asyncio.wait_for(bug.settled.wait(), timeout)
        except asyncio.TimeoutError:
            return WAIT, bug.owner
        return bug.state, bug.detail

    def sessions_opened(self) -> int:
        return self.opened


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
            if idle and all(bug.state != OPEN for bug in self.bugs.values()):
                ray.actor.exit_actor()  # type: ignore[no-untyped-call]


def board() -> Any:
    """The job's board actor (made by the first task that needs it)."""
    import ray

    job = ray.get_runtime_context().get_job_id()
    remote: Any = ray.remote
    actor = remote(num_cpus=0, max_concurrency=1000)(BoardActor)
    return actor.options(
        name=BOARD.format(job=job), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True,
    ).remote()


def who() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


def handle(call: Again, excinfo: ExcInfo, open_session: OpenSession) -> Any:
    """The failed ``call`` in a Ray worker: its own session, or the outcome of the one
    already open for the same bug."""
    import ray

    key = bug_key(call.ref.name, excinfo)
    try:
        shared = board()
        verdict, detail = ray.get(shared.claim_async.remote(key, who(), False, *_where(call)))
    except Exception as exc:  # no board: this task's own session, as without Ray
        log.warning("the job's bug board is out of reach (%s): a session of its own", exc)
        return open_session(excinfo)
    if verdict == OPEN:
        return _own_session(call, excinfo, open_session, shared, key)
    if verdict == WAIT:
        _release(excinfo)
        print(f"podcode: {key}: a session is open for this bug ({detail}); this task waits "
              "for its outcome and holds no session of its own", flush=True)
        idle = call.settings.idle  # the open session is cleaned up by then at the latest
        verdict, detail = _wait(shared, key, idle.max_idle_seconds + idle.grace_seconds,
                                call.alive)
    if verdict == FIXED:
        return _with_fix(call, detail, open_session, shared, key)
    if verdict == FULL:
        print(f"podcode: {key}: no session opens for this task: {detail}", flush=True)
        add_note(excinfo[1], f"podcode: no debug session opened: {detail}")
    else:
        why = "no outcome in time" if verdict == WAIT else detail
        add_note(excinfo[1], f"podcode: the session for this bug ended without a fix ({why})")
    raise excinfo[1].with_traceback(excinfo[2])


def _where(call: Again) -> tuple[str, tuple[int, int]]:
    """This worker's node, and the bounds on open sessions the task's settings set."""
    import ray

    ray_settings = call.settings.ray
    return ray.get_runtime_context().get_node_id(), (
        ray_settings.ray_max_sessions, ray_settings.ray_max_sessions_per_node)


def _own_session(
    call: Again, excinfo: ExcInfo, open_session: OpenSession, shared: Any, key: str
) -> Any:
    import ray

    from interactive.ray.waiters import WATCH_SECONDS, WaiterWatch
    from interactive.storage.workspace import Snapshot

    base = Snapshot.take(call.workspace)
    watch = WaiterWatch(lambda: ray.get(shared.waiters.remote(key), timeout=WATCH_SECONDS))
    try:
        value = open_session(excinfo, on_open=watch.start)
    except BaseException as exc:
        shared.settle.remote(key, FAILED, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        watch.stop()
    shared.settle.remote(key, FIXED, edits(base))
    return value


def edits(base: Any) -> Edits:
    from interactive.resume.plan import edits_since

    return [(str(path.relative_to(base.root)), old, new) for path, old, new in edits_since(base)]


def _wait(
    shared: Any, key: str, limit: float, alive: Callable[[], bool]
) -> tuple[str, Any]:
    """Wait for the bug's outcome, at most ``limit`` seconds, while ``alive()``."""
    import ray

    deadline = time.monotonic() + limit
    verdict: tuple[str, Any] = (WAIT, None)
    while alive() and time.monotonic() < deadline:
        verdict = ray.get(shared.outcome.remote(key, POLL_SECONDS))
        if verdict[0] != WAIT:
            break
    return verdict


def _with_fix(
    call: Again, fix: Edits, open_session: OpenSession, shared: Any, key: str
) -> Any:
    """Apply the bug's fix here and call the task again; failing the same way, a new
    session opens."""
    import ray

    from interactive.resume.patching import plan

    root = call.workspace
    patch = plan([(root / rel, old, new) for rel, old, new in fix], [call.fn])
    _write(root, fix)
    patch.apply()
    print(f"podcode: {key}: fixed in its session; this task runs again: {patch.summary()}",
          flush=True)
    try:
        return call()
    except NEVER_DEBUGGED:
        raise
    except BaseException as exc:
        again: ExcInfo = (type(exc), exc, exc.__traceback__)
    if bug_key(call.ref.name, again) != key:
        return handle(call, again, open_session)
    ray.get(shared.claim_async.remote(key, who(), True, *_where(call)))
    return _own_session(call, again, open_session, shared, key)


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
