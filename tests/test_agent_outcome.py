"""What became of a resume (interactive/agent/outcome.py), on fake time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interactive.agent.outcome import FAILED, FAILED_AGAIN, RETURNED, RUNNING, decide, wait


def test_the_decision_from_status_and_record() -> None:
    assert decide(0, {"state": "waiting", "attempt": 0}, None) is None
    assert decide(0, {"state": "resuming", "attempt": 0}, None) is None
    assert decide(0, {"state": "waiting", "attempt": 1}, None) == FAILED_AGAIN
    assert decide(0, {"state": "warned", "attempt": 1}, None) == FAILED_AGAIN
    assert decide(0, {"state": "done", "attempt": 0}, None) == RETURNED
    assert decide(0, None, "done") == RETURNED
    assert decide(0, None, "failed") == FAILED
    assert decide(0, None, None) is None


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_session_that_stops_answering_has_returned_when_its_record_says_done() -> None:
    answers: list[Mapping[str, Any] | None] = [{"state": "resuming", "attempt": 2},
                                               {"state": "running", "attempt": 2}, None]
    time = FakeTime()
    result = wait(2, lambda: answers.pop(0) if answers else None, lambda: "done", 60,
                  clock=time.clock, sleep=time.sleep)
    assert (result.kind, result.status["state"]) == (RETURNED, "done")
    assert result.waited == 0.5


def test_a_task_still_running_at_the_bound_says_so() -> None:
    time = FakeTime()
    result = wait(0, lambda: {"state": "running", "attempt": 0}, lambda: None, 10,
                  clock=time.clock, sleep=time.sleep)
    assert result.kind == RUNNING and result.waited >= 10 and result.status["state"] == "running"
