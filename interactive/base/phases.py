"""The phases a session goes through, and the commands its waiting task receives.

Both are ``str`` enums: a :class:`Phase` is written to ``session.json``, the status API
and the pod's ``podcode.io/state`` label as its plain value (``"waiting"``), and
compares equal to that string, so records written by any podcode version read back as
the same phase.

How a session moves (what the code does; :data:`NEXT` is the table)::

    running ──fails──▶ waiting ──resume──▶ resuming ──▶ running ──fails again──▶ waiting
                         │  ▲
                  idle   ▼  │ active again
                        warned ──deadline──▶ reaping
    any phase ──close──▶ done | failed

A session changes phase only through :meth:`interactive.base.state.SessionState.move`,
which refuses what :data:`NEXT` forbids (:class:`PhaseRefused`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from interactive.base.errors import SessionError


class Phase(str, enum.Enum):
    """Where a session stands."""

    RUNNING = "running"
    """The task runs (before its first failure, or again after a resume)."""
    WAITING = "waiting"
    """The session is open and waits for the engineer."""
    RESUMING = "resuming"
    """A resume was asked for: the edits are being patched in."""
    WARNED = "warned"
    """Idle too long: the owner was warned, cleanup follows unless it is kept."""
    REAPING = "reaping"
    """Cleanup is under way: edits saved, IDE stopped, pod deleted."""
    DONE = "done"
    """The task succeeded; the session is closed."""
    FAILED = "failed"
    """The session closed without success (abort, cleanup, preemption, a new failure)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def busy(self) -> bool:
        """The task itself runs: the session is active, whatever the samplers say."""
        return self in BUSY

    @property
    def ended(self) -> bool:
        """The session is over: its record is history, its secrets unused."""
        return self in ENDED

    @property
    def in_session(self) -> bool:
        """A debug session is open (what another rank forwards a resume or abort to)."""
        return self in IN_SESSION


BUSY = frozenset({Phase.RUNNING, Phase.RESUMING})
ENDED = frozenset({Phase.DONE, Phase.FAILED})
IN_SESSION = frozenset({Phase.WAITING, Phase.WARNED, Phase.RESUMING, Phase.REAPING})

NEXT: Mapping[Phase, frozenset[Phase]] = {
    Phase.RUNNING: frozenset({Phase.WAITING, *ENDED}),
    Phase.WAITING: frozenset({Phase.RESUMING, Phase.WARNED, Phase.REAPING, *ENDED}),
    Phase.WARNED: frozenset({Phase.WAITING, Phase.RESUMING, Phase.REAPING, *ENDED}),
    Phase.RESUMING: frozenset({Phase.RUNNING, *ENDED}),
    Phase.REAPING: ENDED,
    Phase.DONE: ENDED,
    Phase.FAILED: ENDED,
}
"""Which phases may follow each one (staying in a phase is always allowed): a resume only
from a waiting session, cleanup only once idle, and closing from anywhere."""

RESUMABLE = frozenset(phase for phase, after in NEXT.items() if Phase.RESUMING in after)
"""Where the engineer may resume from (waiting, warned); the IDE joins these too."""


def may_follow(before: Phase, after: Phase) -> bool:
    """Whether a session in ``before`` may move to ``after``."""
    return after == before or after in NEXT[before]


class PhaseRefused(SessionError):
    """A phase change that :data:`NEXT` forbids (a bug in podcode, never the user's)."""

    def __init__(self, task: str, before: Phase, after: Phase) -> None:
        super().__init__(f"session {task} cannot go from {before} to {after}: "
                         f"after {before} come only {', '.join(sorted(NEXT[before])) or 'none'}")
        self.before, self.after = before, after


def phase_of(value: object) -> Phase | None:
    """The phase a record's ``state`` names; None for anything else."""
    try:
        return Phase(value)
    except ValueError:
        return None


class CommandKind(str, enum.Enum):
    """What the task waiting in :meth:`Session.wait` is told to do."""

    RESUME = "resume"
    """Run the task again with the edits patched in (the detail: the planned resume)."""
    ABORT = "abort"
    """Give up: the decorated call raises the original exception."""
    REAPED = "reaped"
    """Cleaned up after being idle: raise ``Reaped`` (the detail: where the edits went)."""
    PREEMPTED = "preempted"
    """SIGTERM: run the ``on_preempt`` hooks, save the edits and checkpoints, exit 143."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
