"""One session per bug across a job's pods, and one resume that brings every pod back.

A job over several pods (``WORLD_SIZE`` larger than ``LOCAL_WORLD_SIZE``) agrees
through its own rendezvous store (:mod:`interactive.distributed.jobstore`):

- **The bug and its owner.** The failing rank claims the generation's bug before it
  breaks the group (:func:`claim_failure`); the first claim stays. Its pod *owns* the
  job's session: its leading rank serves the IDE and mails the owner. Every other
  pod's ranks keep their debugger and control API, take no IDE or email, and say
  where the session is (:meth:`JobSession.where`). Where no rank claimed one (every
  rank's error is the group breaking), the first pod whose session opens claims it.
- **Commands.** What the job does next is one key per generation,
  ``command/<generation>`` (:class:`JobCommand`: resume, abort, end); the first one
  posted stays, so a resume and an abort that cross never split the job. Each pod's
  leading rank waits on it (the store wakes it: no polling); the owner's pod waits on
  ``request/<generation>`` instead, which a resume asked on another pod sets, and
  every command sets too.
- **One resume.** A resume on the owner's pod posts the fix first (the files edited
  since the session opened, each with the sha256 it had at the failure, signed with
  the job's secret: :mod:`interactive.distributed.jobfix`), then the next generation,
  then the command. Each other pod applies the fix to its own copy only where its
  file is the one the owner's pod had (else it refuses, naming the file and the pod,
  and its session waits on) and resumes its ranks. A resume asked on another pod
  wakes the owner's pod, which resumes as if asked there.
- **A pod lost.** Each pod's leading rank beats in the store; the owner's pod watches
  every pod's beat, the first two other pods to beat watch the owner's (:data:`WARDENS`).
  A pod whose beat stops for
  :data:`jobstore.LOST_AFTER_SECONDS`, or a store that stops answering, ends the
  job's sessions: the job cannot go on, and torchrun's agents then restart it (or
  fail it) as without podcode.

This module holds the channel's side; :mod:`interactive.session.across_pods` joins it
to a session.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interactive.base.rayworker import in_worker as in_ray_worker
from interactive.base.threads import start_thread
from interactive.distributed import jobfix, jobsecret
from interactive.distributed.jobstore import (
    BEAT_SECONDS,
    LOST_AFTER_SECONDS,
    Bug,
    JobStore,
    JobStoreError,
    Liveness,
)
from interactive.distributed.ranks import RankInfo
from interactive.kube.labels import JobMark

log = logging.getLogger(__name__)

RESUME, ABORT, END = "resume", "abort", "end"
ASKED = "asked"
"""The ``why`` of a resume asked of the owner's pod by another pod, not yet posted."""
WAIT_SLICE = datetime.timedelta(hours=12)
"""How long one wait for a command lasts before it is asked again (torch logs a line at
each timeout, so it is long: a command, or the store going away, ends it earlier)."""
SPURIOUS_WAKE_SECONDS = 0.5
"""A wait that returns before its key is set (a signal broke it) is asked again after this."""
MAX_FIX_BYTES = 64 << 20
"""The most a fix carries (the store holds it until the job ends)."""


def several_pods(info: RankInfo) -> bool:
    """Whether the job's ranks are spread over several pods (nodes) and agree through
    the job's store: not Ray's workers (Ray Train), which go through the job's bug board."""
    return info.world_size > info.local_world_size and not in_ray_worker()


def pod_ranks(info: RankInfo) -> tuple[int, ...]:
    """The job's ranks that run in this pod: torchrun numbers a node's ranks one after
    the other, so this rank's local rank says where the pod's block starts."""
    first = info.rank - info.local_rank
    block = tuple(range(first, first + info.local_world_size))
    return block if first >= 0 and info.rank in block else (info.rank,)  # else: all we know


@dataclass(frozen=True)
class JobCommand:
    """What the job does next, as the first pod to post it said."""

    kind: str
    """:data:`RESUME`, :data:`ABORT` or :data:`END`."""
    pod: str
    """The pod that posted it."""
    fix: bool = False
    """RESUME: a signed fix was posted for the generation before it."""
    why: str = ""

    def encode(self) -> bytes:
        return json.dumps({"kind": self.kind, "pod": self.pod, "fix": self.fix,
                           "why": self.why}, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> JobCommand | None:
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(str(data["kind"]), str(data["pod"]), bool(data.get("fix")),
                       str(data.get("why") or ""))
        except (ValueError, KeyError, TypeError):
            return None


# -- the process's channel --------------------------------------------------------------

_lock = threading.Lock()
_store: JobStore | None = None
_tried = False


def channel() -> JobStore | None:
    """This process's channel to its job's store, opened at the first use; None where the
    job has no store or it cannot be reached (said once)."""
    global _store, _tried
    with _lock:
        if not _tried:
            _tried = True
            try:
                _store = JobStore.open()
            except JobStoreError as exc:
                log.warning("%s: each pod keeps its own session for this bug", exc)
        return _store


def claim_failure(rank: int, error: BaseException) -> None:
    """The failing rank claims its generation's bug for its pod (before it breaks the
    group, so the other pods' ranks find it when theirs fail)."""
    store = channel()
    if store is None:
        return
    try:
        generation = store.generation()
        store.claim_bug(generation, Bug(rank, store.pod, type(error).__name__,
                                        str(error)[:2000]))
    except JobStoreError as exc:
        log.warning("cannot claim this rank's bug in the job's store: %s", exc)


# -- a fix: from a workspace, into one --------------------------------------------------


@dataclass(frozen=True)
class Edits:
    files: list[jobfix.FileEdit]
    left: list[str]
    """Why some changed files are not carried (one line each)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def edits_since(root: Path, changed: list[str], texts: dict[str, str],
                existed: set[str]) -> Edits:
    """The fix: each file of ``changed`` (relative to ``root``) with its content now and
    its sha256 at the failure (from ``texts``, the snapshot's; a file not in ``existed``
    is new). A deleted file, or one whose content at the failure is not known (binary or
    large), is not carried: said in ``left``."""
    files: list[jobfix.FileEdit] = []
    left: list[str] = []
    total = 0
    for rel in changed:
        path = root / rel
        if not path.is_file():
            left.append(f"{rel} was deleted: a fix carries new and edited files only")
            continue
        if rel in existed and rel not in texts:
            left.append(f"{rel} is not carried: its content at the failure is not known "
                        "(a binary or large file)")
            continue
        content = path.read_bytes()
        if total + len(content) > MAX_FIX_BYTES:
            left.append(f"{rel} is not carried: the fix would pass {MAX_FIX_BYTES >> 20} MiB")
            continue
        total += len(content)
        base = _sha256(texts[rel].encode()) if rel in existed else None
        files.append(jobfix.FileEdit(rel, content, base))
    return Edits(files, left)


def local_digests(root: Path, paths: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for rel in paths:
        try:
            out[rel] = _sha256((root / rel).read_bytes())
        except FileNotFoundError:
            out[rel] = None
    return out


def apply_fix(fix: jobfix.Fix, root: Path, pod: str) -> list[jobfix.FileDecision]:
    """Write the fix into ``root`` where every file may take it (:func:`jobfix.decide`);
    where one may not, nothing is written. The decisions, refusals first."""
    paths = [entry.path for entry in fix.manifest.files]
    decisions = jobfix.decide(fix.manifest, local_digests(root, paths), pod)
    refused = [d for d in decisions if d.verdict is jobfix.Verdict.REFUSE]
    if refused:
        return refused + [d for d in decisions if d not in refused]
    for decision in decisions:
        if decision.verdict is jobfix.Verdict.APPLY:
            _write(root / decision.path, fix.contents[decision.path])
    return decisions


def _write(path: Path, content: bytes) -> None:
    """Replace ``path`` at once (a rank that reads it sees the old or the new file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- one generation's session, seen from one pod ----------------------------------------


@dataclass
class JobSession:
    """This pod's part in the job's session for one generation (one bug)."""

    store: JobStore
    generation: int
    bug: Bug
    serving: str
    """The pod that serves the job's session: the first bug's, for the job's life (its
    IDE stays open across resumes)."""

    @property
    def pod(self) -> str:
        return self.store.pod

    @property
    def owner(self) -> bool:
        """This pod serves the job's session (the IDE, the email, the fix)."""
        return self.serving == self.pod

    @classmethod
    def join(cls, rank: int, error: str | None) -> JobSession | None:
        """The job's session for the bug now open; None without a channel. A pod that
        finds no bug claimed (every rank stopped by the group breaking) claims it."""
        store = channel()
        if store is None:
            return None
        try:
            generation = store.generation()
            bug = store.bug(generation)
            if bug is None:
                kind, _, message = (error or "").partition(": ")
                bug = store.claim_bug(generation, Bug(rank, store.pod, kind or "unknown",
                                                      message)).owner
            serving = None if bug is None else store.session_pod(bug.pod)
        except JobStoreError as exc:
            log.warning("%s: this pod keeps its own session", exc)
            return None
        if bug is None or serving is None:
            log.warning("the job's bug in its store cannot be read: this pod keeps its own "
                        "session")
            return None
        return cls(store, generation, bug, serving)

    def where(self) -> str:
        """Where the job's session is, for the ranks of another pod."""
        return (f"the job's session is on pod {self.serving} (rank {self.bug.rank} on pod "
                f"{self.bug.pod} failed: {self.bug.error}: {self.bug.message[:200]}); open it "
                "there, resume or abort from any rank")

    def status(self) -> dict[str, Any]:
        """The ``job`` part of ``GET /api/status``."""
        try:
            command = self.command()
        except JobStoreError:
            command = None
        return {
            "pod": self.pod, "session_pod": self.serving, "generation": self.generation,
            "failed_rank": self.bug.rank, "failed_pod": self.bug.pod,
            "error": f"{self.bug.error}: {self.bug.message}",
            "serves_session": self.owner,
            "command": None if command is None else command.kind,
        }

    def mark(self, info: RankInfo) -> JobMark | None:
        """What this pod's marks say of the job (:data:`interactive.kube.labels.ANN_JOB`),
        for ``podcode list`` to show the job's pods as one entry; None where the store's
        address is not known (nothing names the job)."""
        where = self.store.where
        if where is None:
            return None
        return JobMark(where.job_id, self.serving, pod_ranks(info), self.owner)

    # -- commands ------------------------------------------------------------------------
    def command(self) -> JobCommand | None:
        """The generation's command (None: none yet); raises :class:`JobStoreError`."""
        return JobCommand.decode(self.store.read(self.store.key("command", self.generation)))

    def post(self, kind: str, why: str = "", fix: bool = False) -> JobCommand:
        """Post the generation's command; the one that stands (an earlier one wins)."""
        mine = JobCommand(kind, self.pod, fix, why)
        stored = self.store.post_command(self.generation, mine.encode())
        return JobCommand.decode(stored) or mine

    def request_resume(self) -> None:
        self.store.request(self.generation, JobCommand(RESUME, self.pod).encode())

    def next_command(self) -> JobCommand | None:
        """Block until the job has a command; the owner's pod, until it is asked to act:
        then a resume asked by another pod reads as a :data:`RESUME` from that pod that is
        not yet posted (:attr:`JobCommand.why` ``"asked"``). None when the wait ended
        without either (the process is ending)."""
        wake = self.store.key("request" if self.owner else "command", self.generation)
        while not (self.store.wait_for(wake, WAIT_SLICE) and self.store.read(wake) is not None):
            log.debug("the wait for %s returned before it was set; waiting again", wake)
            time.sleep(SPURIOUS_WAKE_SECONDS)  # a wait a signal broke: wait again
        command = self.command()
        if command is not None or not self.owner:
            return command
        asked = JobCommand.decode(self.store.read(wake))
        return None if asked is None else JobCommand(RESUME, asked.pod, why=ASKED)

    # -- the fix -------------------------------------------------------------------------
    def post_fix(self, edits: Edits) -> JobCommand:
        """Post ``edits`` (signed; not when the job has no secret) and the next generation,
        then the resume; the command that stands."""
        carried, why = False, ""
        if edits.files:
            try:
                secret = jobsecret.load()
            except jobsecret.JobSecretError as exc:
                log.warning("the fix is not sent to the job's other pods: %s", exc)
                why = (f"pod {self.pod} has no job secret, so no code crosses pods (set "
                       f"{jobsecret.ENV} in every pod of the job: {jobsecret.DOCS})")
            else:
                self.store.post_fix(self.generation, edits.files, secret)
                carried = True
        self.store.bump_generation()
        return self.post(RESUME, why, fix=carried)

    def fetch_fix(self) -> jobfix.Fix:
        """The generation's fix, verified; raises :class:`jobfix.FixRefused` or
        :class:`jobsecret.JobSecretError` saying why it is not applied."""
        fix = self.store.read_fix(self.generation, jobsecret.load())
        if fix is None:
            raise jobfix.FixRefused(f"the fix of generation {self.generation} is not in the "
                                    "job's store")
        return fix


# -- liveness ---------------------------------------------------------------------------


WARDENS = 2
"""How many of the other pods watch the serving pod's beat (the first to beat): enough
that one lost with it still leaves one, few enough that the store's host does not pay
for a read per pod and beat."""


def wardens(pods: list[str], serving: str, count: int = WARDENS) -> list[str]:
    """The pods that watch the serving pod: the first ``count`` others to have beaten."""
    return [pod for pod in pods if pod != serving][:count]


class Beats:
    """This pod's beat, and the watch on the pods the job's session needs: the serving
    pod watches every pod, the first :data:`WARDENS` other pods watch the serving pod's.
    One per process, started by the first session that leads its pod; it beats until
    the process ends."""

    def __init__(self, store: JobStore, interval: float = BEAT_SECONDS,
                 lost_after: float = LOST_AFTER_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.interval = interval
        self.lost_after = lost_after
        self.clock = clock
        self.watching: tuple[JobSession, Callable[[str], None]] | None = None
        """The open session and what to call with the reason when the job cannot go on."""
        self._liveness = Liveness(lost_after)
        self._warden = False
        """Whether this pod, not the serving one, watches the serving pod's beat."""
        self._failing_since: float | None = None
        self._lock = threading.Lock()

    def watch(self, job: JobSession | None, lost: Callable[[str], None] | None = None) -> None:
        warden = False
        if job is not None and not job.owner:
            try:
                self.store.beat()  # listed before the others choose their wardens
                warden = self.store.pod in wardens(self.store.pods(), job.serving)
            except JobStoreError:
                warden = True  # the list cannot be read: watch rather than not
        with self._lock:
            self.watching = None if job is None or lost is None else (job, lost)
            self._liveness = Liveness(self.lost_after)
            self._warden = warden

    def tick(self) -> str | None:
        """One beat, and one look at the watched pods; why the job cannot go on, if so."""
        now = self.clock()
        try:
            self.store.beat()
            with self._lock:
                watching, liveness, warden = self.watching, self._liveness, self._warden
            if watching is None:
                self._failing_since = None
                return None
            job = watching[0]
            if job.owner:
                counts = self.store.beats()
            elif warden:
                counts = {job.serving: self.store.beat_count(job.serving)}
            else:
                counts = {}
            self._failing_since = None
        except JobStoreError as exc:
            if self._failing_since is None:
                self._failing_since = now
            if now - self._failing_since >= self.lost_after and self.watching is not None:
                return f"the job's store stopped answering ({exc})"
            return None
        counts.pop(self.store.pod, None)
        lost = liveness.update(counts, now)
        if not lost:
            return None
        names = ", ".join(lost)
        return (f"pod {names} of the job stopped answering for "
                f"{self.lost_after:.0f} s (lost: preempted, or its node failed)")

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            why = self.tick()
            watching = self.watching
            if why is not None and watching is not None:
                self.watch(None)
                try:
                    watching[1](why)
                except Exception:
                    log.exception("could not end the job's session after: %s", why)
            stop.wait(self.interval)


_beats: Beats | None = None


def beats(store: JobStore) -> Beats:
    """The process's :class:`Beats`, started at the first call."""
    global _beats
    with _lock:
        if _beats is None:
            _beats = Beats(store)
            start_thread(_beats.run, "job-beat", threading.Event())
        return _beats
