"""The engineer's edits saved as they are made, not only when the session ends.

A session saves the edits to the store when it ends: resume, abort, cleanup, SIGTERM. A
process killed outright gets no such chance: ``ray job stop`` (Ray kills the job's
workers), the kernel's OOM killer, a node that is lost. So while a session waits, each
change that the idle monitor sees in the workspace (it scans the files every
``poll_seconds`` anyway) is saved to the store too, always into the same folder of the
session. A kill then loses at most one poll's worth of typing. Nothing more is read or
written while nobody edits, nor when what changed was saved already.

Every save is bounded (:class:`interactive.storage.edits.SaveLimits`: bytes and files in
all), stops between two files once the session no longer waits, and after SIGTERM once
``preempt_grace_seconds`` have passed (:class:`EditSaver`): a save in progress never
holds the pod past its grace. What a save leaves out is said in the log and in the
session's notes (``podcode status``, the IDE).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from interactive.base.phases import Phase
from interactive.base.state import SessionState
from interactive.reaper.activity import FileSampler, Sampler
from interactive.reaper.idle import Sample
from interactive.storage.edits import SavedEdits, SaveLimits, SaveLog, WorkspaceChanges

logger = logging.getLogger(__name__)

LEFT_OUT_NOTE = (
    "the last save of your edits left some changed files out (one save copies the smallest "
    "files first, at most {files} files and {mib} MiB): its manifest.json in the store "
    "lists them under left_out"
)


class Save(Protocol):
    """The session's ``save_edits(when, stop=...)``: the store URL of the folder, or None;
    ``stop`` is asked between two files."""

    def __call__(self, when: float, *, stop: Callable[[], bool] | None = None) -> str | None: ...


@dataclass
class EditSaver:
    """The session's saves of the edits: bounded, cut short at SIGTERM's grace, the same
    changes never written twice into one folder, and what a save left out told."""

    task: str
    state: SessionState
    limits: SaveLimits = field(default_factory=SaveLimits)
    log: SaveLog = field(default_factory=SaveLog)
    clock: Callable[[], float] = time.monotonic
    _note: str | None = field(default=None, repr=False)

    def preempted(self, grace_seconds: float) -> None:
        """SIGTERM came: every save (the one in progress too) stops ``grace_seconds`` from
        now, between two files."""
        deadline = self.clock() + grace_seconds
        self.limits = SaveLimits(self.limits.max_bytes, self.limits.max_files, deadline)

    def save(self, snapshot: WorkspaceChanges, when: float,
             stop: Callable[[], bool] | None = None) -> str | None:
        """Save into the folder of ``when``; its URL (None: no time was left)."""
        from interactive.storage.backends import open_store
        from interactive.storage.edits import save_edits

        limits = self.limits
        if limits.deadline is not None and self.clock() >= limits.deadline:
            logger.warning("no time left to save the edits of %s (SIGTERM's grace is over); "
                           "the saves made as they were made stand", self.task)
            return None
        bounded = SaveLimits(limits.max_bytes, limits.max_files, limits.deadline, stop)
        saved = save_edits(snapshot, open_store(), self.task, when, bounded, log=self.log,
                           clock=self.clock)
        self._tell(saved)
        return saved.url

    def _tell(self, saved: SavedEdits) -> None:
        """A note while the last save left files out; gone once one saves them all."""
        if not saved.written:
            return
        if self._note is not None:
            self.state.forget(self._note)
            self._note = None
        if saved.left_out:
            self._note = LEFT_OUT_NOTE.format(files=self.limits.max_files,
                                              mib=self.limits.max_bytes // (1024 * 1024))
            self.state.note(self._note)


@dataclass
class AutosavingFiles:
    """A workspace sampler that saves the edits whenever it sees files change.

    ``when`` names the folder every save of this session goes to
    (``edits/<task>/<when>/``), so repeated saves replace one another rather than
    piling up; ``latest.diff`` follows each of them.
    """

    files: Sampler
    save: Save
    when: float
    waiting: Callable[[], bool] = lambda: True
    """Whether the session waits for a person now. While the task runs again after a
    resume, what changes in the workspace is the task's output, not edits: not saved."""
    saved: list[str] = field(default_factory=list)
    """The URL of each save made (the last one is the session's draft)."""
    _first: bool = field(default=True, repr=False)

    def sample(self, now: float) -> Sample:
        sample = self.files.sample(now)
        # The first scan only learns the files (it cannot tell a change): edits made before
        # it, while the monitor was starting, are looked for once then.
        if (sample.active or self._first) and self.waiting():
            self._first = False
            self._save()  # the monitor runs one check at a time: saves never overlap
        return sample

    def _save(self) -> None:
        try:
            url = self.save(self.when, stop=lambda: not self.waiting())
        except Exception:  # the store may be down: the next change tries again
            logger.exception("could not save the edits as they were made")
            return
        if url is not None:
            logger.debug("edits saved as they were made to %s", url)
            self.saved.append(url)


def autosaving(
    samplers: Sequence[Sampler], save: Save, when: float, state: SessionState
) -> list[Sampler]:
    """``samplers`` with the workspace's file sampler saving the edits it sees while the
    session (its ``state``) waits for a person."""
    def waiting() -> bool:
        return state.state in (Phase.WAITING, Phase.WARNED)

    return [
        AutosavingFiles(sampler, save, when, waiting) if isinstance(sampler, FileSampler)
        else sampler
        for sampler in samplers
    ]
