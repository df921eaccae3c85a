"""What became of a resume, decided from what the session says (pure) and waited for with
a clock seam: the task returned, failed again (a new session waits with the new failure),
failed for good, or still runs after the bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from interactive.base.phases import RESUMABLE

POLL_SECONDS = 0.25
RETURNED, FAILED_AGAIN, FAILED, RUNNING = "returned", "failed again", "failed", "still running"


@dataclass(frozen=True)
class Outcome:
    kind: str
    """:data:`RETURNED`, :data:`FAILED_AGAIN`, :data:`FAILED` or :data:`RUNNING`."""
    status: Mapping[str, Any]
    """The session's last status (or what its record says once it has ended)."""
    waited: float


def decide(before_attempt: int | None, status: Mapping[str, Any] | None,
           ended_state: str | None) -> str | None:
    """The outcome once known, else None (keep waiting).

    ``status``: ``GET /api/status`` now (None: the control API no longer answers);
    ``ended_state``: the session's state as its record (or pod) says once it answers no
    more (None: not known yet)."""
    if status is None:
        if ended_state == "done":
            return RETURNED
        if ended_state in ("failed", "reaping"):
            return FAILED
        return None
    state = status.get("state")
    attempt = status.get("attempt")
    if state == "done":
        return RETURNED
    if state == "failed":
        return FAILED
    if state in {p.value for p in RESUMABLE} and attempt != before_attempt:
        return FAILED_AGAIN
    return None


def wait(before_attempt: int | None, poll: Callable[[], Mapping[str, Any] | None],
         ended: Callable[[], str | None], bound: float,
         clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """Poll the session until :func:`decide` knows, or ``bound`` seconds passed."""
    started = clock()
    last: Mapping[str, Any] = {}
    while True:
        status = poll()
        if status is not None:
            last = status
        kind = decide(before_attempt, status, ended() if status is None else None)
        waited = clock() - started
        if kind is not None:
            final = last if status is not None else {**last, "state": ended() or "ended"}
            return Outcome(kind, final, waited)
        if waited >= bound:
            return Outcome(RUNNING, last, waited)
        sleep(POLL_SECONDS)
