"""The session's shared, observable state (what ``GET /api/status`` shows).

Several threads write it (the task's, the session's loop, the monitor's pool, a
notebook cell's); each write holds its lock. A phase changes only through
:meth:`SessionState.move`, which checks the change against
:data:`~interactive.base.phases.NEXT` and makes it under that same lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from interactive.base.phases import Phase, PhaseRefused, may_follow, phase_of
from interactive.base.types import Clock, system_clock

log = logging.getLogger(__name__)

MAX_ACTIONS = 100
"""The actions of agents a session keeps (the newest); older ones are only counted."""
MAX_ACTION_CHARS = 200
"""The longest description of one action (a cell's code is cut to it)."""


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
    actions: list[dict[str, Any]] = field(default_factory=list)
    """What an agent did in the session (:meth:`act`), oldest first, the last
    :data:`MAX_ACTIONS` of them: ``{"actor", "action", "at", "status"}`` each."""
    actions_dropped: int = 0
    """Older actions no longer kept in :attr:`actions`."""
    version: int = 0
    """Counts the changes of what the status shows (idle time aside): a client that
    saw this version waits for the next (``GET /api/status?version=N&wait=S``)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _watchers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _phase_listeners: list[Callable[[Phase, Phase], None]] = field(
        default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.state = Phase(self.state)
        if not self.last_activity:
            self.last_activity = self.clock()

    def set(self, **changes: Any) -> None:
        """Change fields at once; a ``state`` among them (a :class:`Phase` or its string) is
        a phase change, checked as :meth:`move` checks it."""
        if "state" in changes:
            self.move(changes.pop("state"), **changes)
            return
        with self._lock:
            changed = self._assign(changes)
        if changed:
            self._changed()

    def move(
        self, to: Phase | str, *, only_from: Collection[Phase] | None = None, **changes: Any
    ) -> bool:
        """The one way a session changes phase: check and set under the lock.

        ``only_from``: the phases the caller decided in; when the session has left them
        meanwhile (a second resume, a warning decided just before a resume, a cleanup that
        another resume overtook) nothing changes and it returns False, a race the caller
        expects. Otherwise a change that :data:`~interactive.base.phases.NEXT` forbids
        raises :class:`PhaseRefused` (a bug: nothing changes). ``changes``: other fields
        set with the phase. True when the phase is now ``to``; the phase listeners
        (:meth:`on_phase`) are told after the lock is let go."""
        after = phase_of(to)
        if after is None:
            raise ValueError(f"unknown session state {to!r}")
        with self._lock:
            before = self.state
            if only_from is not None and before not in only_from:
                return False
            if not may_follow(before, after):
                raise PhaseRefused(self.task, before, after)
            changed = self._assign({"state": after, **changes})
            listeners = list(self._phase_listeners) if after != before else []
        if changed:
            self._changed()
        for listener in listeners:
            try:
                listener(before, after)
            except Exception:
                log.exception("a phase listener of session %s failed", self.task)
        return True

    def on_phase(self, listener: Callable[[Phase, Phase], None]) -> None:
        """Call ``listener(before, after)`` (on the moving thread, in no lock) after each
        change of phase."""
        with self._lock:
            self._phase_listeners.append(listener)

    def _assign(self, changes: dict[str, Any]) -> bool:
        """Set ``changes`` (the lock held); whether any differed."""
        changed = any(getattr(self, name) != value for name, value in changes.items())
        for name, value in changes.items():
            setattr(self, name, value)
        return changed

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

    def act(self, actor: str, action: str, status: int | None = None) -> None:
        """Record that ``actor`` (an agent, named by the call's
        :data:`~interactive.base.routes.ACTOR_HEADER`) did ``action``, answered ``status``."""
        entry = {"actor": actor[:MAX_ACTION_CHARS], "action": _cut(action),
                 "at": self.clock(), "status": status}
        with self._lock:
            self.actions.append(entry)
            extra = len(self.actions) - MAX_ACTIONS
            if extra > 0:
                del self.actions[:extra]
                self.actions_dropped += extra
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
                "actions": [dict(action) for action in self.actions],
                "actions_dropped": self.actions_dropped,
                "version": self.version,
            }


def _cut(text: str) -> str:
    """One line of at most :data:`MAX_ACTION_CHARS` characters."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_ACTION_CHARS else f"{line[:MAX_ACTION_CHARS - 3]}..."
