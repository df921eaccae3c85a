"""The pure idle decision, with fake time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from interactive.base.settings import build_settings
from interactive.reaper.idle import (
    Activity,
    IdleWarning,
    Kind,
    Limits,
    decide,
    next_check,
    projected_reap_at,
)

LIMITS = Limits(max_idle_seconds=100.0, grace_seconds=30.0)


def test_limits_from_settings() -> None:
    settings = build_settings({"max_idle_seconds": 5, "grace_seconds": 2}, {})
    limits = Limits.from_settings(settings.idle)
    assert limits == Limits(5.0, 2.0)


def test_active_session_needs_nothing() -> None:
    assert decide(Activity(last_activity=0.0), 99.9, LIMITS).kind is Kind.NONE


def test_idle_session_is_warned_with_a_full_grace() -> None:
    action = decide(Activity(last_activity=0.0), 105.0, LIMITS)
    assert action.kind is Kind.WARN
    assert action.warning == IdleWarning(idle_since=0.0, reap_at=135.0)


def test_keepalive_postpones_the_warning() -> None:
    activity = Activity(last_activity=0.0, keepalive_until=500.0)
    assert decide(activity, 499.0, LIMITS).kind is Kind.NONE
    assert decide(activity, 500.0, LIMITS).kind is Kind.WARN


def test_warned_session_is_reaped_at_the_deadline() -> None:
    warned = Activity(0.0, warning=IdleWarning(0.0, 135.0))
    assert decide(warned, 134.9, LIMITS).kind is Kind.NONE
    assert decide(warned, 135.0, LIMITS).kind is Kind.REAP


def test_activity_after_the_warning_cancels_it() -> None:
    warned = Activity(120.0, warning=IdleWarning(0.0, 135.0))
    assert decide(warned, 130.0, LIMITS).kind is Kind.CANCEL


def test_keepalive_after_the_warning_cancels_it() -> None:
    warned = Activity(0.0, keepalive_until=200.0, warning=IdleWarning(0.0, 135.0))
    assert decide(warned, 130.0, LIMITS).kind is Kind.CANCEL


def test_next_check_wakes_at_the_deadline() -> None:
    assert next_check(Activity(0.0), 95.0, LIMITS, poll_seconds=10.0) == 5.0
    assert next_check(Activity(0.0), 50.0, LIMITS, poll_seconds=10.0) == 10.0
    warned = Activity(0.0, warning=IdleWarning(0.0, 135.0))
    assert next_check(warned, 134.5, LIMITS, poll_seconds=10.0) == 0.5
    assert next_check(warned, 140.0, LIMITS, poll_seconds=10.0) == 0.0


def test_projected_reap_at() -> None:
    assert projected_reap_at(Activity(10.0), LIMITS) == 140.0
    assert projected_reap_at(Activity(10.0, keepalive_until=1000.0), LIMITS) == 1030.0
    assert projected_reap_at(Activity(0.0, warning=IdleWarning(0.0, 135.0)), LIMITS) == 135.0
    # activity after the warning: the warning no longer holds
    assert projected_reap_at(Activity(120.0, warning=IdleWarning(0.0, 135.0)), LIMITS) == 250.0


# -- properties over whole timelines ---------------------------------------------

times = st.lists(st.floats(min_value=0, max_value=2000, allow_nan=False), max_size=8)


def simulate(
    limits: Limits, poll: float, touches: list[float], keepalives: list[float], end: float
) -> list[tuple[float, Kind, Activity]]:
    """Drive decide() as the monitor does, with activity at the given times."""
    last, keepalive, warning = 0.0, 0.0, None
    now, log = 0.0, []
    while now <= end:
        last = max([last, *(t for t in touches if t <= now)])
        keepalive = max([keepalive, *(k + 300 for k in keepalives if k <= now)])
        activity = Activity(last, keepalive, warning)
        action = decide(activity, now, limits)
        log.append((now, action.kind, activity))
        if action.kind is Kind.WARN:
            warning = action.warning
        elif action.kind is Kind.CANCEL:
            warning = None
        elif action.kind is Kind.REAP:
            break
        now += max(1e-3, next_check(Activity(last, keepalive, warning), now, limits, poll))
    return log


@settings(max_examples=200, deadline=None)
@given(
    idle=st.floats(min_value=1, max_value=500),
    grace=st.floats(min_value=0, max_value=500),
    poll=st.floats(min_value=0.5, max_value=60),
    touches=times,
    keepalives=times,
)
def test_never_reaped_early_and_always_warned_first(
    idle: float, grace: float, poll: float, touches: list[float], keepalives: list[float]
) -> None:
    limits = Limits(idle, grace)
    log = simulate(limits, poll, touches, keepalives, end=6000.0)
    now, kind, activity = log[-1]
    # with no activity after 2000 s, the session is always reaped in the end
    assert kind is Kind.REAP
    # never before idle + grace since the last activity, nor before keep-alive + grace
    assert now >= activity.last_activity + idle + grace - 1e-6
    assert now >= activity.keepalive_until + grace - 1e-6
    # the warning that expired was sent at least grace seconds earlier, and not cancelled
    warns = [t for t, k, _ in log if k is Kind.WARN]
    cancels = [t for t, k, _ in log if k is Kind.CANCEL]
    assert warns and warns[-1] <= now - grace + 1e-6
    assert not cancels or cancels[-1] < warns[-1]


@settings(max_examples=200, deadline=None)
@given(
    last=st.floats(min_value=0, max_value=1e6),
    keepalive=st.floats(min_value=0, max_value=1e6),
    now=st.floats(min_value=0, max_value=2e6),
)
def test_no_warning_before_the_idle_deadline_or_keepalive(
    last: float, keepalive: float, now: float
) -> None:
    action = decide(Activity(last, keepalive), now, LIMITS)
    assert action.kind in (Kind.NONE, Kind.WARN)
    if action.kind is Kind.WARN:
        assert now >= last + LIMITS.max_idle_seconds and now >= keepalive
        assert action.warning is not None
        assert action.warning.reap_at == now + LIMITS.grace_seconds
    else:
        assert now < last + LIMITS.max_idle_seconds or now < keepalive
