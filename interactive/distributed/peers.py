"""The ranks of one pod, seen from each other: who has a session, who leads, who to tell.

Each rank of a distributed job keeps its own home, ``$PODCODE_HOME/rank-<local
rank>/``, with its own ``session.json`` (mode 0600, in a 0700 folder): that
file is also how its peers find it. The first rank whose session opens takes
the pod's leader lock (``$PODCODE_HOME/leader.lock``, an ``flock`` held for the
session's life): the leader serves code-server, marks the pod, emails the
owner and deletes the pod at cleanup; the others serve their debugger and
control API only. A resume or abort on any rank is forwarded to every other
local rank that waits in a session, so they go on together.

A rank that fails announces it (``rank-<local rank>/failure.json``) before it
breaks the process group. A peer whose collective then fails because the group
broke ("Connection closed by peer") finds that announcement: it is stopped
because of that rank's bug, not one of its own, and says so. Such a peer
announces its failure too, marked ``broken``: it is never taken for a cause.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interactive.base import routes
from interactive.base.control_client import ControlClient, ControlError
from interactive.base.files import write_json
from interactive.base.identity import process_identity as process_identity  # re-exported
from interactive.base.identity import process_started, same_start
from interactive.base.phases import CommandKind, Phase
from interactive.base.record import FILE, SessionRecord, write_session
from interactive.base.threads import start_thread
from interactive.distributed.ranks import RankInfo
from interactive.reaper.idle import Sample

log = logging.getLogger(__name__)

FAILURE = "failure.json"
"""A rank's announcement that it failed and is about to break the group."""
BROKEN_GROUP = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
)
"""What a collective raises in a rank whose peer broke the group (gloo, NCCL)."""
PEER_HEADER = routes.PEER_HEADER
"""Set on a forwarded call: the receiving rank does not forward it again."""
COMMAND_ROUTES = {CommandKind.RESUME: routes.RESUME, CommandKind.ABORT: routes.ABORT}
"""The control API's call for each command a rank forwards to the others."""
FORWARD_TIMEOUT_SECONDS = 5.0


def rank_home(base: Path, info: RankInfo) -> Path:
    """The folder of this rank's session files (``base`` itself for a single process)."""
    return base / f"rank-{info.local_rank}" if info.distributed else base


@dataclass(frozen=True)
class Peer:
    """What one local rank's ``session.json`` says, and whether its process lives."""

    local_rank: int
    record: SessionRecord = field(repr=False)
    alive: bool

    @property
    def state(self) -> str:
        return self.record.state if self.alive else "gone"

    @property
    def in_session(self) -> bool:
        return self.alive and self.record.phase is not None and self.record.phase.in_session

    @property
    def busy(self) -> bool:
        """It runs its task (or resumes it): the pod is busy."""
        return self.alive and self.record.phase is not None and self.record.phase.busy

    def summary(self) -> dict[str, Any]:
        return {
            "local_rank": self.local_rank,
            "rank": (self.record.rank or {}).get("rank"),
            "state": self.state,
            "task": self.record.task,
            "error": self.record.error,
            "debug": self.record.debug,
        }


@dataclass
class Peers:
    """This rank's view of the pod's ranks."""

    base: Path
    info: RankInfo
    _lock_fd: int | None = field(default=None, init=False, repr=False)

    # -- reading ---------------------------------------------------------------------
    def record_path(self, local_rank: int) -> Path:
        """Where ``local_rank`` writes its session record (its control URL and token)."""
        return self.base / f"rank-{local_rank}" / FILE

    def other_records(self) -> dict[int, Path]:
        """Every other local rank's record path, by local rank (there or not yet)."""
        return {local: self.record_path(local) for local in range(self.info.local_world_size)
                if local != self.info.local_rank}

    def read(self, local_rank: int) -> Peer | None:
        record = SessionRecord.load(self.record_path(local_rank))
        if record is None:
            return None
        alive = record.pid is not None and process_started(record.pid) == record.started
        return Peer(local_rank, record, alive)

    def others(self) -> list[Peer]:
        """Every other local rank that has written a record, live or not."""
        found = (self.read(r) for r in range(self.info.local_world_size))
        return [p for p in found if p is not None and p.local_rank != self.info.local_rank]

    def status(self) -> list[dict[str, Any]]:
        """For ``GET /api/status``: each other local rank, ``no session`` when unknown."""
        known = {peer.local_rank: peer.summary() for peer in self.others()}
        return [
            known.get(r, {"local_rank": r, "state": "not started"})
            for r in range(self.info.local_world_size)
            if r != self.info.local_rank
        ]

    # -- failing ---------------------------------------------------------------------
    def announce_failure(self, error: str, because: int | None, broken: bool = False) -> None:
        """Say this rank failed (``because``: the rank whose failure made it fail, where
        known; ``broken``: its error is the group breaking, so it is no cause)."""
        folder = rank_home(self.base, self.info)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        announcement = {"rank": self.info.rank, "error": error, "because": because,
                        "broken": broken, **process_identity()}
        write_json(folder / FAILURE, announcement, mode=0o600, durable=False)

    def withdraw_failure(self) -> None:
        """This rank resumes: its failure is no one's reason to stop any more."""
        (rank_home(self.base, self.info) / FAILURE).unlink(missing_ok=True)

    def culprit(self) -> tuple[int, str] | None:
        """(rank, error) of a live local rank that announced a failure of its own (a rank
        stopped by the group breaking is never one)."""
        for local in range(self.info.local_world_size):
            if local == self.info.local_rank:
                continue
            announced = _read_failure(self.base / f"rank-{local}" / FAILURE)
            if (announced is not None and announced.get("because") is None
                    and not announced.get("broken")):
                return int(announced["rank"]), str(announced["error"])
        return None

    # -- leading ---------------------------------------------------------------------
    def try_lead(self) -> bool:
        """Take the pod's leader lock if it is free; held until :meth:`release`."""
        if self._lock_fd is not None:
            return True
        self.base.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.base / "leader.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def leader(self) -> Peer | None:
        """The live peer that serves the pod's IDE, if any."""
        return next(
            (p for p in self.others() if p.in_session and p.record.leader),
            None,
        )

    def outlive_leader(self, timeout: float, poll: float = 0.2,
                       sleep: Callable[[float], object] = time.sleep,
                       clock: Callable[[], float] = time.monotonic) -> bool:
        """Wait (at most ``timeout`` seconds) until no peer leads a session: a rank that
        was cleaned up ends after the leader, which mails the owner and deletes the pod
        (a launcher such as torchrun stops every rank as soon as one ends). Whether the
        leader ended in time."""
        deadline = clock() + timeout
        while self.leader() is not None:
            if clock() >= deadline:
                log.warning("the leading rank did not end within %.0f s of this rank's "
                            "cleanup; this rank ends now", timeout)
                return False
            sleep(poll)
        return True

    def release(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock

    # -- telling ---------------------------------------------------------------------
    def forward(self, command: CommandKind) -> list[int]:
        """POST the command's call (:data:`COMMAND_ROUTES`) to every other local rank in a
        session; who was told."""
        told = []
        others = self.others()
        for peer in others:
            if not peer.in_session or peer.state == Phase.RESUMING:
                continue
            try:
                _post(peer.record, command)
                told.append(peer.local_rank)
            except ControlError as exc:
                log.warning("could not %s local rank %d: %s", command, peer.local_rank, exc)
        running = [p.local_rank for p in others if p.state == Phase.RUNNING]
        if command == CommandKind.RESUME and running:
            log.warning(
                "local ranks %s are not in a session: this resume does not reach them (a "
                "rank running its task goes on with it; a Ray Train worker waiting on the "
                "job's bug board takes the fix from the board)",
                running,
            )
        return told


def _read_failure(path: Path) -> dict[str, Any] | None:
    """An announcement whose process still lives (a stale one is ignored)."""
    try:
        announced = json.loads(path.read_text())
        pid, started = int(announced["pid"]), announced["started"]
        _ = announced["rank"], announced["error"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    alive = same_start(started, process_started(pid))
    return announced if alive and isinstance(announced, dict) else None


def broke_with_the_group(error: BaseException) -> bool:
    """Whether ``error`` is what a collective raises when a peer broke the group."""
    text = str(error)
    return any(sign in text for sign in BROKEN_GROUP)


def _post(record: SessionRecord, command: CommandKind) -> None:
    if not record.serving:
        raise ControlError("its record has no control API")
    client = ControlClient(record.control_url, record.token, FORWARD_TIMEOUT_SECONDS,
                           headers={PEER_HEADER: "1"})
    route = COMMAND_ROUTES.get(command)
    if route is None:
        raise ControlError(f"{command} is not a call a rank forwards")
    client.call("POST", route, {})


@dataclass
class PeerSampler:
    """Activity sampler: the pod is busy while any rank is.

    A peer running its task (or resuming) is activity now; a peer's own last
    activity is adopted as it is (``touch(when)``), never as "now", so ranks
    that read each other settle on the same idle clock instead of keeping
    each other awake.
    """

    peers: Peers
    touch: Callable[[float], None]
    publish: Callable[[], None]
    """Writes this rank's record (with its last activity) for the others."""

    def sample(self, now: float) -> Sample:
        self.publish()
        busy = []
        for peer in self.peers.others():
            if not peer.alive:
                continue
            if peer.busy:
                busy.append(f"local rank {peer.local_rank} {peer.state}")
            if peer.record.last_activity is not None:
                self.touch(peer.record.last_activity)
        return Sample("ranks", bool(busy), float(len(busy)), ", ".join(busy))


class PeerWatch:
    """While this rank runs its task, say once when another local rank opens a session,
    so that a rank blocked on the failed one does not hang silently."""

    def __init__(self, peers: Peers, poll_seconds: float = 2.0) -> None:
        self.peers = peers
        self.poll_seconds = poll_seconds
        self.reported: set[tuple[int, Any]] = set()
        self.in_session = False
        """Set by this rank's session while it is open (then there is nothing to report)."""

    def start(self) -> None:
        start_thread(self._run, "peers")

    def _run(self) -> None:
        while True:
            time.sleep(self.poll_seconds)
            try:
                self.check()
            except Exception:
                log.debug("peer watch failed", exc_info=True)

    def check(self) -> list[str]:
        """Log (once per peer session) what this rank is waiting on; the lines logged."""
        lines = []
        for peer in self.peers.others():
            key = (peer.local_rank, peer.record.attempt)
            if self.in_session or not peer.in_session or key in self.reported:
                continue
            self.reported.add(key)
            line = (
                f"podcode: {self.peers.info.label}: local rank {peer.local_rank} failed in "
                f"{peer.record.task} ({peer.record.error}) and waits in a debug "
                "session; this rank waits on it (a collective with it fails here and "
                "opens this rank's session)"
            )
            log.warning("%s", line)
            lines.append(line)
        return lines


_current: Peers | None = None
_watch: PeerWatch | None = None


def join(base: Path, info: RankInfo) -> Peers | None:
    """At a distributed process's first enabled call: say "running", watch the others."""
    global _current, _watch
    if not info.distributed or _current is not None:
        return _current
    _current = Peers(base, info)
    placeholder = SessionRecord(Phase.RUNNING, rank=info.as_dict(), **process_identity())
    write_session(rank_home(base, info), placeholder.to_json())
    _watch = PeerWatch(_current)
    _watch.start()
    return _current


def current() -> Peers | None:
    """This process's peers, once :func:`join` ran in a distributed job."""
    return _current


_open_sessions = 0
_open_lock = threading.Lock()


def set_in_session(value: bool) -> None:
    """A session of this process opened (True) or closed (False); several may be open."""
    global _open_sessions
    with _open_lock:
        _open_sessions = max(0, _open_sessions + (1 if value else -1))
        if _watch is not None:
            _watch.in_session = _open_sessions > 0
