"""The open session of a bug learns that other tasks wait for its fix.

Tasks that hit a bug whose session is open wait for that session's outcome
(:mod:`interactive.ray.bugs`), each saying so in its own output. The engineer in the
session should see it too: once the job's board counts a task waiting, the session's
status (``podcode status``, the IDE's status bar, ``GET /api/status``) gets a note with
how many wait then. The board is asked every :data:`WATCH_SECONDS` while the session is
open, and no more once it has answered with a count.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from interactive.base.threads import start_thread

log = logging.getLogger(__name__)

WATCH_SECONDS = 15.0
NOTE = (
    "{count} more task(s) hit this bug and wait for this session: they run your fix when you "
    "resume, and raise their own exception if the session ends without one (meanwhile their "
    "frames are cleared and their GPU memory is released)"
)


@dataclass
class WaiterWatch:
    """Asks the board (``count()``: the tasks waiting for this bug) until one waits."""

    count: Callable[[], int]
    seconds: float = WATCH_SECONDS
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self, session: Any) -> None:
        """The session is open: watch for it (its ``state`` gets the note)."""
        start_thread(self.watch, "ray-waiters", session.state.note)

    def stop(self) -> None:
        self._stop.set()

    def watch(self, note: Callable[[str], object]) -> None:
        while not self._stop.wait(self.seconds):
            try:
                count = self.count()
            except Exception as exc:  # the board is busy or gone: ask again later
                log.debug("the bug board did not say who waits: %s", exc)
                continue
            if count:
                note(NOTE.format(count=count))
                return
