from __future__ import annotations

import pytest

from interactive.base.state import SessionState


def test_cleanup_at_counts_down_from_the_last_activity_and_keepalive() -> None:
    now = [1000.0]
    state = SessionState("t", clock=lambda: now[0], max_idle_seconds=60, grace_seconds=30)
    assert state.status()["cleanup_at"] == 1090
    now[0] = 1010
    state.touch()
    assert state.status()["cleanup_at"] == 1100
    state.set(keepalive_until=2000)
    assert state.status()["cleanup_at"] == 2030
    state.set(reap_at=1500.0)  # a warning was sent: its deadline wins
    assert state.status()["cleanup_at"] == 1500


def test_unknown_state_is_refused_and_notes_are_unique() -> None:
    state = SessionState("t")
    with pytest.raises(ValueError, match="unknown session state"):
        state.set(state="sleeping")
    state.note("no owner")
    state.note("no owner")
    assert state.status()["notes"] == ["no owner"]
    assert SessionState("t").status()["cleanup_at"] is None


def test_each_change_of_the_status_counts_once_and_wakes_its_watchers() -> None:
    state = SessionState("m.task", clock=lambda: 100.0)
    woken: list[int] = []
    stop = state.watch(lambda: woken.append(state.version))
    state.set(state="waiting", error="ValueError: x")
    state.set(state="waiting", error="ValueError: x")  # nothing changed: no news
    state.touch(150.0)  # the idle time moves on by itself: no news either
    state.note("no owner")
    state.note("no owner")
    state.forget("no owner")
    assert woken == [1, 2, 3]
    assert state.status()["version"] == 3
    stop()
    state.set(reap_at=200.0)
    assert woken == [1, 2, 3] and state.version == 4
