"""The idle decision: active → warned → reaping, as a pure function of time.

Nothing here reads a clock, a file or a process: :func:`decide` is given what
was observed and the time, and answers what to do. The monitor
(:mod:`interactive.reaper.monitor`) does the sampling and the actions.

Timeline, with ``last`` the last activity and ``keepalive`` the keep-alive
deadline::

    idle deadline = max(last + max_idle_seconds, keepalive)
    now >= idle deadline              → WARN, reap_at = now + grace_seconds
    warned, then activity or keepalive → CANCEL (back to active)
    warned and now >= reap_at          → REAP
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from interactive.base.settings import IdleSettings


@dataclass(frozen=True)
class Limits:
    """The idle timing of one session (seconds)."""

    max_idle_seconds: float
    """Idle time before the owner is warned."""
    grace_seconds: float
    """Time between the warning and the cleanup."""

    @classmethod
    def from_settings(cls, idle: IdleSettings) -> Limits:
        return cls(float(idle.max_idle_seconds), float(idle.grace_seconds))


@dataclass(frozen=True)
class Sample:
    """One reading of one activity source."""

    source: str
    """``files``, ``cpu``, ``gpu``... (for the log)."""
    active: bool
    """The source saw the user (or their code) working since the last reading."""
    value: float | None = None
    """The reading: percent of one CPU, GPU utilisation percent, files changed."""
    detail: str = ""
    """Why it counts as active (for the log)."""


@dataclass(frozen=True)
class IdleWarning:
    """A warning that was sent and not cancelled."""

    idle_since: float
    """Last activity when the warning was sent."""
    reap_at: float
    """When the session will be cleaned up."""


@dataclass(frozen=True)
class Activity:
    """What the decision looks at."""

    last_activity: float
    keepalive_until: float = 0.0
    warning: IdleWarning | None = None


class Kind(enum.Enum):
    NONE = "none"
    WARN = "warn"
    CANCEL = "cancel"
    REAP = "reap"


@dataclass(frozen=True)
class Action:
    kind: Kind
    warning: IdleWarning | None = None
    """For WARN: the warning to send; for REAP: the warning that expired."""


NOTHING = Action(Kind.NONE)


def idle_deadline(activity: Activity, limits: Limits) -> float:
    """When the session counts as idle (no warning before this time)."""
    return max(activity.last_activity + limits.max_idle_seconds, activity.keepalive_until)


def decide(activity: Activity, now: float, limits: Limits) -> Action:
    """What to do at ``now``, given the observed ``activity``."""
    warning = activity.warning
    if warning is None:
        if now >= idle_deadline(activity, limits):
            reap_at = now + limits.grace_seconds
            return Action(Kind.WARN, IdleWarning(activity.last_activity, reap_at))
        return NOTHING
    if activity.last_activity > warning.idle_since or activity.keepalive_until > now:
        return Action(Kind.CANCEL, warning)
    if now >= warning.reap_at:
        return Action(Kind.REAP, warning)
    return NOTHING


def next_check(activity: Activity, now: float, limits: Limits, poll_seconds: float) -> float:
    """Seconds to wait before the next check: a poll, or sooner if a deadline comes first."""
    deadline = activity.warning.reap_at if activity.warning else idle_deadline(activity, limits)
    return max(0.0, min(poll_seconds, deadline - now))


def projected_reap_at(activity: Activity, limits: Limits) -> float:
    """When cleanup happens if nothing else changes (the answer to a keep-alive)."""
    warning = activity.warning
    if (
        warning is not None
        and activity.last_activity <= warning.idle_since
        and activity.keepalive_until <= warning.reap_at - limits.grace_seconds
    ):
        return warning.reap_at
    return idle_deadline(activity, limits) + limits.grace_seconds
