"""The owner of a bug's session beats, and learns that other tasks wait for its fix.

Tasks that hit a bug whose session is open wait for that session's outcome
(:mod:`interactive.ray.bugs`), each saying so in its own output. From the moment it claims
the bug until its session ends, the owner tells the job's board that it is alive every
:data:`interactive.ray.bugs.HEARTBEAT_SECONDS` (a bug whose owner falls silent is taken
over by a waiting task); each beat answers how many tasks wait. Once one does, the
session's status (``podcode status``, the IDE's status bar, ``GET /api/status``) gets a
note with how many wait then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from interactive.base.threads import start_thread

log = logging.getLogger(__name__)

NOTE = (
    "{count} more task(s) hit this bug and wait for this session: they run your fix when you "
    "resume, and raise their own exception if the session ends without one (meanwhile their "
    "frames are cleared and their GPU memory is released)"
)


@dataclass
class OwnerWatch:
    """Beats (``beat()``: tell the board, get how many tasks wait) until stopped; the
    session attached gets the note once a task waits."""

    beat: Callable[[], int]
    seconds: float = 1.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _note: Callable[[str], object] | None = None
    _noted: bool = False

    def start(self) -> None:
        start_thread(self.watch, "ray-owner")

    def attach(self, session: Any) -> None:
        """The session is open: its ``state`` gets the note."""
        self._note = session.state.note

    def stop(self) -> None:
        self._stop.set()

    def watch(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                count = self.beat()
            except Exception as exc:  # the board is busy or gone: beat again later
                log.debug("the bug board did not take the beat: %s", exc)
                continue
            if count and self._note is not None and not self._noted:
                self._noted = True
                self._note(NOTE.format(count=count))
