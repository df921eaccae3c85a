"""The engineer's edits saved as they are made, not only when the session ends.

A session saves the edits to the store when it ends: resume, abort, cleanup, SIGTERM. A
process killed outright gets no such chance: ``ray job stop`` (Ray kills the job's
workers), the kernel's OOM killer, a node that is lost. So while a session waits, each
change that the idle monitor sees in the workspace (it scans the files every
``poll_seconds`` anyway) is saved to the store too, always into the same folder of the
session. A kill then loses at most one poll's worth of typing. Nothing more is read or
written while nobody edits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from interactive.base.phases import Phase
from interactive.base.state import SessionState
from interactive.culler.activity import FileSampler, Sampler
from interactive.culler.idle import Sample

logger = logging.getLogger(__name__)

Save = Callable[[float], "str | None"]
"""The session's ``save_edits(when)``: the store URL of the folder, or None."""


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
            url = self.save(self.when)
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
