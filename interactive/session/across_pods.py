"""A session's part in its job's one session across pods.

:mod:`interactive.distributed.jobsession` is the channel; here it is joined to a
:class:`~interactive.session.core.Session`:

- **Roles.** The pod that serves the job's session (the first bug's pod, for the
  job's life) starts the IDE and mails the owner; a session on another pod starts
  neither, says where the job's session is, and never goes idle on its own (the IDE's
  pod decides: its activity, keepalive and cleanup are the job's).
- **Resume.** Asked on the session's pod (any rank, any door): the edits are planned
  there, then posted with the next generation and the resume. Asked on another pod: the
  session's pod is woken and resumes as if asked there. Each other pod's leading rank
  applies the fix to its own copy and resumes its ranks.
- **Abort, cleanup, a pod lost, SIGTERM.** Each posts a command every pod acts on: abort
  ends every rank with its error; cleanup, a lost pod or a stopped store end every
  rank after its edits are saved.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from interactive.base.errors import ResumeConflict
from interactive.base.threads import start_thread
from interactive.distributed import jobfix, jobsecret
from interactive.distributed.jobbeats import beats
from interactive.distributed.jobfiles import apply_fix, edits_since
from interactive.distributed.jobsession import (
    ABORT,
    ASKED,
    END,
    RESUME,
    JobCommand,
    JobSession,
    several_pods,
)
from interactive.distributed.jobstore import JobStoreError
from interactive.reaper.idle import Sample

if TYPE_CHECKING:
    from interactive.session.core import Session

log = logging.getLogger(__name__)


class JobRole:
    """One session's part in the job's session for the generation now open."""

    def __init__(self, session: Session, job: JobSession) -> None:
        self.session = session
        self.job = job
        self.known: JobCommand | None = None
        """The generation's command as far as this session has seen or posted it."""
        self._closed = threading.Event()

    @classmethod
    def join(cls, session: Session, error: str | None) -> JobRole | None:
        """The job's role for ``session`` (None: a job on one pod, or without a channel)."""
        peers = session.peers
        if peers is None or not several_pods(peers.info):
            return None
        job = JobSession.join(peers.info.rank, error)
        return None if job is None else cls(session, job)

    def status(self) -> dict[str, Any]:
        """The ``job`` part of the session's status (the store is not asked)."""
        return self.job.status(self.known)

    @property
    def serves(self) -> bool:
        """This pod serves the job's session (IDE, email, cleanup)."""
        return self.job.owner

    def start(self) -> None:
        """The session waits: its pod's leading rank beats and watches the job's commands."""
        if not self.session.leader:
            return
        info = self.session.peers.info if self.session.peers is not None else None
        pods = info.world_size // max(1, info.local_world_size) if info is not None else 1
        pulse = beats(self.job.store)
        pulse.watch(self.job, self._lost, pods)
        start_thread(self._watch, f"job-{self.job.generation}")

    def stop(self) -> None:
        """The generation is over for this session (resumed, ended)."""
        self._closed.set()
        if self.session.leader:
            pulse = beats(self.job.store)
            if pulse.watching is not None and pulse.watching[0] is self.job:
                pulse.watch(None)

    # -- what the session is asked ---------------------------------------------------------
    def before_resume(self) -> dict[str, Any] | None:
        """A resume asked on this session (not by a peer, not by the job): None when it
        resumes here; else the answer (the session's pod was asked to resume the job)."""
        try:
            command = self.job.command()
        except JobStoreError as exc:
            raise ResumeConflict(f"cannot resume the job: {exc}") from None
        if command is not None and command.kind != RESUME:
            why = f": {command.why}" if command.why else ""
            raise ResumeConflict(f"cannot resume: the job's session was ended by pod "
                                 f"{command.pod} ({command.kind}{why})")
        if self.serves or command is not None:
            return None  # the session's pod, or the job resumed already (this pod's own copy)
        try:
            self.job.request_resume()
        except JobStoreError as exc:
            raise ResumeConflict(f"cannot resume the job: {exc}") from None
        return {"job": {"asked": self.job.serving, "generation": self.job.generation},
                "patched": [], "not_loaded": [], "not_executed": []}

    def post_resume(self) -> dict[str, Any]:
        """The session's pod resumes: post the fix, the next generation, the resume."""
        if not self.serves:
            return {}
        snapshot = self.session.resume_base  # the workspace at this bug (the last resume's)
        if snapshot is None:
            return {}
        try:
            command = self.job.command()
        except JobStoreError as exc:
            self.session.state.note(f"the job's other pods were not resumed: {exc}")
            return {"job": {"posted": False, "error": str(exc)}}
        if command is not None:  # posted already (another rank of this pod, a second resume)
            return {"job": {"posted": False, "command": command.kind, "by": command.pod}}
        edits = edits_since(snapshot.root, snapshot.changed(), snapshot.texts,
                            set(snapshot.stamps))
        for line in edits.left:
            log.warning("%s", line)
            self.session.state.note(line)
        try:
            command = self.known = self.job.post_fix(edits)
        except (JobStoreError, jobfix.FixRefused) as exc:
            log.warning("the job's other pods are not resumed: %s", exc)
            self.session.state.note(f"the job's other pods were not resumed: {exc}")
            return {"job": {"posted": False, "error": str(exc)}}
        log.warning("pod %s resumes the job: %s", self.job.pod,
                    f"the fix ({', '.join(e.path for e in edits.files)}) is sent to every pod"
                    if command.fix else "no fix is sent")
        if edits.files and not command.fix:
            self.session.state.note(
                "the fix was not sent to the job's other pods (no job secret): they resume "
                "with their own copy of the code")
        return {"job": {"posted": True, "fix": [e.path for e in edits.files] if command.fix
                        else [], "generation": self.job.generation}}

    def post(self, kind: str, why: str = "") -> None:
        """Tell every pod (an abort, a cleanup, this pod going away)."""
        try:
            self.known = self.job.post(kind, why)
        except JobStoreError as exc:
            log.warning("could not tell the job's other pods to %s: %s", kind, exc)

    # -- what the job says -----------------------------------------------------------------
    def _watch(self) -> None:
        try:
            command = self.job.next_command()
        except JobStoreError as exc:
            if not self._closed.is_set():
                self._end(f"the job's store stopped answering ({exc})")
            return
        if self._closed.is_set() or command is None:
            return
        if command.why != ASKED:
            self.known = command
        try:
            self._act(command)
        except Exception:
            log.exception("could not act on the job's command %s", command)

    def _act(self, command: JobCommand) -> None:
        if command.why == ASKED:  # the session's pod, asked to resume by another pod
            log.warning("pod %s resumes the job's session, as asked from pod %s",
                        self.job.pod, command.pod)
            try:
                self.session.resume(wait=True)  # after a resume being planned here, if any
            except ResumeConflict as exc:
                if self._resumed():
                    return  # crossed with a resume asked here: the job resumes once
                log.warning("a resume asked on pod %s is refused: %s", command.pod, exc)
                self.session.state.note(f"a resume asked on pod {command.pod} was refused: "
                                        f"{exc}")
            return
        if command.pod == self.job.pod:
            return  # this pod's own: its ranks were told already
        if command.kind == RESUME:
            self._resume(command)
        elif command.kind == ABORT:
            log.warning("pod %s aborted the job's session", command.pod)
            self.session.abort(job=True)
        elif command.kind == END:
            self._end(f"pod {command.pod} ended the job's session: {command.why}", post=False)

    def _resumed(self) -> bool:
        """Whether the job's resume for this bug is posted (by any pod)."""
        try:
            command = self.job.command()
        except JobStoreError:
            return False
        return command is not None and command.kind == RESUME

    def _resume(self, command: JobCommand) -> None:
        session = self.session
        if command.fix:
            try:
                decisions = apply_fix(self.job.fetch_fix(), session.workspace, self.job.pod)
            except (jobfix.FixRefused, jobsecret.JobSecretError, JobStoreError) as exc:
                self._refused([f"the fix from pod {command.pod} is not applied: {exc}"])
                return
            refused = [d.reason for d in decisions if d.verdict is jobfix.Verdict.REFUSE]
            if refused:
                self._refused(refused)
                return
            log.warning("%s", "; ".join(d.reason for d in decisions)
                        or f"pod {self.job.pod}: the fix changes no file")
        else:
            line = (f"pod {command.pod} resumed the job without sending a fix"
                    f"{': ' + command.why if command.why else ''}: this pod runs its own "
                    "copy of the code")
            log.warning("%s", line)
            session.state.note(line)
        try:
            session.resume(job=True)
        except ResumeConflict as exc:
            log.warning("pod %s could not resume: %s", self.job.pod, exc)
            session.state.note(f"the job resumed, this pod could not: {exc}")

    def _refused(self, reasons: list[str]) -> None:
        for reason in reasons:
            log.error("%s", reason)
            self.session.state.note(reason)
        self.session.state.note(
            "this pod's ranks wait on: make the fix in this pod's copy too, then resume "
            "here (podcode resume); the other pods' ranks wait for them (10 minutes)")

    def _lost(self, why: str) -> None:
        """The beat found the job cannot go on: tell every pod, end here."""
        self._end(why)

    def _end(self, why: str, post: bool = True) -> None:
        """End this pod's ranks, their edits saved first."""
        if post:
            self.post(END, why)
        url = self.session.save_edits()
        line = f"podcode: {why}; this pod's ranks end" + (f" (edits saved in {url})" if url
                                                            else "")
        log.error("%s", line)
        self.session.state.note(line)
        self.session.abort(job=True)


class JobSampler:
    """A session on a pod that does not serve the job's session never idles on its own:
    the IDE's pod decides for the job (its activity, keepalive and cleanup)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def sample(self, now: float) -> Sample:
        role = self.session.job
        if role is None or role.serves:
            return Sample("job", False)
        return Sample("job", True, 1.0, f"the job's session is on pod {role.job.serving}")
