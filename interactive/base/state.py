"""The session's shared, observable state (what ``GET /api/status`` shows)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from interactive.base.phases import Phase, may_follow, phase_of
from interactive.base.types import Clock, system_clock

log = logging.getLogger(__name__)


@dataclass
class SessionState:
    """Mutable state of one session, shared by the API, the monitor and the waiter.

    Times are wall-clock seconds since the epoch (``clock()``).
    """

    task: str
    clock: Clock = system_clock
    state: Phase = Phase.RUNNING
    error: str | None = None
    attempt: int = 0
    owner: str | None = None
    last_activity: float = 0.0
    """When the user (or their code) was last seen active."""
    reap_at: float | None = None
    """When cleanup will happen; set once a warning is sent."""
    keepalive_until: float = 0.0
    """No warning before this time (``POST /api/keepalive``)."""
    gpu_utilization: float | None = None
    """Last NVML reading in percent, None without a GPU."""
    ide: str | None = None
    """code-server: ``up``, ``restarting`` (it exited), ``down`` (it could not be started
    again); None without one."""
    max_idle_seconds: float | None = None
    grace_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    """Things the user should know (no owner, no SMTP, API refused...)."""
    version: int = 0
    """Counts the changes of what the status shows (idle time aside): a client that
    saw this version waits for the next (``GET /api/status?version=N&wait=S``)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _watchers: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.state = Phase(self.state)
        if not self.last_activity:
            self.last_activity = self.clock()

    def set(self, **changes: Any) -> None:
        """Change fields at once; ``state`` takes a :class:`Phase` or its string."""
        if "state" in changes:
            phase = phase_of(changes["state"])
            if phase is None:
                raise ValueError(f"unknown session state {changes['state']!r}")
            changes["state"] = phase
        with self._lock:
            before = self.state
            changed = any(getattr(self, name) != value for name, value in changes.items())
            for name, value in changes.items():
                setattr(self, name, value)
        if changed:
            self._changed()
        after = changes.get("state", before)
        if not may_follow(before, after):
            log.warning("session %s went from %s to %s, which it never should", self.task,
                        before, after)

    def touch(self, when: float | None = None) -> None:
        """Record activity now (or at ``when``)."""
        with self._lock:
            self.last_activity = max(self.last_activity, self.clock() if when is None else when)

    def note(self, text: str) -> None:
        with self._lock:
            if text in self.notes:
                return
            self.notes.append(text)
        self._changed()

    def forget(self, text: str) -> None:
        """Drop a note that no longer holds (the IDE finished installing)."""
        with self._lock:
            if text not in self.notes:
                return
            self.notes.remove(text)
        self._changed()

    def watch(self, changed: Callable[[], None]) -> Callable[[], None]:
        """Call ``changed()`` (on the changing thread) after each change of the status;
        returns what stops it."""
        with self._lock:
            self._watchers.append(changed)

        def stop() -> None:
            with self._lock:
                if changed in self._watchers:
                    self._watchers.remove(changed)

        return stop

    def _changed(self) -> None:
        with self._lock:
            self.version += 1
            watchers = list(self._watchers)
        for changed in watchers:
            try:
                changed()
            except Exception:
                log.exception("a watcher of session %s failed", self.task)

    def idle_seconds(self) -> float:
        return max(0.0, self.clock() - self.last_activity)

    def _cleanup_at(self) -> float | None:
        """When cleanup happens if nothing else does (for countdowns), or None."""
        if self.reap_at is not None:
            return self.reap_at
        if self.max_idle_seconds is None or self.grace_seconds is None:
            return None
        warn_at = max(self.last_activity + self.max_idle_seconds, self.keepalive_until)
        return warn_at + self.grace_seconds

    def status(self) -> dict[str, Any]:
        """The JSON body of ``GET /api/status``."""
        with self._lock:
            return {
                "state": self.state.value,
                "task": self.task,
                "error": self.error,
                "attempt": self.attempt,
                "idle_seconds": round(max(0.0, self.clock() - self.last_activity), 1),
                "reap_at": self.reap_at,
                "owner": self.owner,
                "gpu_utilization": self.gpu_utilization,
                "ide": self.ide,
                "cleanup_at": self._cleanup_at(),
                "max_idle_seconds": self.max_idle_seconds,
                "grace_seconds": self.grace_seconds,
                "notes": list(self.notes),
                "version": self.version,
            }
