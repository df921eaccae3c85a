"""One session per bug across a job's pods, and one resume that brings every pod back.

A job over several pods (``WORLD_SIZE`` larger than ``LOCAL_WORLD_SIZE``) agrees
through its own rendezvous store (:mod:`interactive.distributed.jobstore`):

- **The bug and its owner.** The failing rank claims the generation's bug before it
  breaks the group (:func:`claim_failure`); the first claim stays. Its pod *owns* the
  job's session, for the job's run (``session-pod``: a later bug elsewhere stays in the
  same IDE): its leading rank serves the IDE and mails the owner. Every other
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
  since the bug, each with the sha256 it had then, signed with the job's secret:
  :mod:`interactive.distributed.jobfiles`, :mod:`interactive.distributed.jobfix`), then
  the next generation, then the command. Each other pod applies the fix to its own
  copy only where its file is the one the owner's pod had (else it refuses, naming the
  file and the pod, and its session waits on) and resumes its ranks. A resume asked on another pod
  wakes the owner's pod, which resumes as if asked there.
- **A pod lost.** Each pod's leading rank beats in the store
  (:mod:`interactive.distributed.jobbeats`); a pod whose beat stops, or a store that
  stops answering, ends the job's sessions: the job cannot go on, and torchrun's
  agents then restart it (or fail it) as without podcode.

This module holds the channel's side; :mod:`interactive.session.across_pods` joins it
to a session.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from interactive.base.rayworker import in_worker as in_ray_worker
from interactive.distributed import jobfix, jobsecret
from interactive.distributed.jobfiles import Edits
from interactive.distributed.jobstore import (
    Bug,
    JobStore,
    JobStoreError,
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
            if bug is None:
                log.warning("the job's bug in its store cannot be read: this pod keeps its "
                            "own session")
                return None
            return cls(store, generation, bug, store.session_pod(bug.pod))
        except JobStoreError as exc:
            log.warning("%s: this pod keeps its own session", exc)
            return None

    def where(self) -> str:
        """Where the job's session is, for the ranks of another pod."""
        return (f"the job's session is on pod {self.serving} (rank {self.bug.rank} on pod "
                f"{self.bug.pod} failed: {self.bug.error}: {self.bug.message[:200]}); open it "
                "there, resume or abort from any rank")

    def status(self, command: JobCommand | None = None) -> dict[str, Any]:
        """The ``job`` part of ``GET /api/status`` (``command``: the generation's, as far as
        this pod knows; the store is not asked, so a status never waits on it)."""
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
