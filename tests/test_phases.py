"""The session's phases and commands: one definition, the same strings everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interactive.base.phases import (
    BUSY,
    ENDED,
    IN_SESSION,
    NEXT,
    RESUMABLE,
    CommandKind,
    Phase,
    PhaseRefused,
    may_follow,
    phase_of,
)
from interactive.base.record import SessionRecord
from interactive.base.state import SessionState

STRINGS = ["running", "waiting", "resuming", "warned", "reaping", "done", "failed"]
"""The strings session.json, the status API and the pod's label have always carried."""


def test_every_phase_is_its_documented_string() -> None:
    assert [phase.value for phase in Phase] == STRINGS
    for phase, text in zip(Phase, STRINGS):
        assert phase == text and text == phase
        assert str(phase) == text and f"{phase}" == text and f"{phase:>8}" == f"{text:>8}"
        assert json.dumps({"state": phase}) == json.dumps({"state": text})
        assert phase_of(text) is phase and phase_of(phase) is phase
    assert phase_of("sleeping") is None and phase_of(None) is None


def test_groupings_hold_the_strings_they_always_held() -> None:
    assert {"running", "resuming"} == BUSY and "resuming" in BUSY
    assert {"done", "failed"} == ENDED and "done" in ENDED and "waiting" not in ENDED
    assert {"waiting", "warned", "resuming", "reaping"} == IN_SESSION
    assert {"waiting", "warned"} == RESUMABLE
    assert [p.value for p in Phase if p.busy] == ["running", "resuming"]
    assert [p.value for p in Phase if p.ended] == ["done", "failed"]
    assert [p.value for p in Phase if p.in_session] == ["waiting", "resuming", "warned", "reaping"]


def test_the_transition_table_is_the_lifecycle() -> None:
    assert set(NEXT) == set(Phase)
    failed_twice = [Phase.RUNNING, Phase.WAITING, Phase.RESUMING, Phase.RUNNING, Phase.WAITING,
                    Phase.WARNED, Phase.WAITING, Phase.WARNED, Phase.REAPING, Phase.FAILED]
    assert all(may_follow(a, b) for a, b in zip(failed_twice, failed_twice[1:]))
    assert all(may_follow(phase, closed) for phase in Phase for closed in ENDED)
    assert not may_follow(Phase.RUNNING, Phase.RESUMING)  # nothing to resume yet
    assert not may_follow(Phase.RESUMING, Phase.WARNED)  # the task runs: never idle
    assert not may_follow(Phase.REAPING, Phase.WAITING)  # cleanup does not go back
    assert not may_follow(Phase.DONE, Phase.RUNNING)


def test_the_state_takes_a_phase_or_its_string_and_refuses_an_unexpected_change() -> None:
    state = SessionState("t")
    assert state.state is Phase.RUNNING
    state.set(state="waiting")
    state.set(state=Phase.RESUMING)
    assert state.state is Phase.RESUMING
    with pytest.raises(PhaseRefused, match="session t cannot go from resuming to warned"):
        state.set(state=Phase.WARNED)
    assert state.state is Phase.RESUMING
    assert SessionState("t", state="waiting").state is Phase.WAITING  # type: ignore[arg-type]


def _in(phase: Phase) -> SessionState:
    state = SessionState("t", clock=lambda: 100.0)
    state.state = phase  # the starting point itself is not under test
    return state


@pytest.mark.parametrize("after", list(Phase), ids=str)
@pytest.mark.parametrize("before", list(Phase), ids=str)
def test_every_change_of_phase_is_checked_against_the_table(before: Phase, after: Phase) -> None:
    state, heard = _in(before), []
    state.on_phase(lambda was, now: heard.append((was, now)))
    version = state.version
    if may_follow(before, after):
        assert state.move(after, error="E") is True
        assert (state.state, state.error) == (after, "E")
        assert heard == ([] if after == before else [(before, after)])
        assert state.version == version + 1
    else:
        with pytest.raises(PhaseRefused) as refused:
            state.move(after, error="E")
        assert (refused.value.before, refused.value.after) == (before, after)
        assert (state.state, state.error, heard, state.version) == (before, None, [], version)


@pytest.mark.parametrize("after", list(Phase), ids=str)
@pytest.mark.parametrize("before", list(Phase), ids=str)
def test_a_race_the_caller_expects_is_answered_false_and_changes_nothing(
    before: Phase, after: Phase
) -> None:
    state = _in(before)
    others = frozenset(Phase) - {before}
    assert state.move(after, only_from=others, error="E") is False
    assert (state.state, state.error) == (before, None)


def test_a_phase_listener_that_fails_does_not_stop_the_change() -> None:
    state, heard = SessionState("t"), []

    def broken(before: Phase, after: Phase) -> None:
        raise RuntimeError("listener")

    state.on_phase(broken)
    state.on_phase(lambda before, after: heard.append(after))
    assert state.move(Phase.WAITING) and heard == [Phase.WAITING]


def test_only_one_of_two_racing_resumes_moves() -> None:
    state = _in(Phase.WAITING)
    moved = [state.move(Phase.RESUMING, only_from=RESUMABLE) for _ in range(2)]
    assert moved == [True, False] and state.state is Phase.RESUMING


def test_a_phase_round_trips_through_the_status_api_and_session_json() -> None:
    for phase, text in zip(Phase, STRINGS):
        state = _in(phase)
        body = json.loads(json.dumps(state.status()))
        assert body["state"] == text and type(state.status()["state"]) is str
        written = json.loads(json.dumps(SessionRecord(phase, task="t").to_json()))
        assert written["state"] == text
        assert SessionRecord.from_json(written, "x", serving=False).phase is phase


def test_commands_are_the_api_verbs() -> None:
    assert [kind.value for kind in CommandKind] == ["resume", "abort", "reaped", "preempted"]
    assert CommandKind.RESUME == "resume" and f"/api/{CommandKind.ABORT}" == "/api/abort"


def test_the_architecture_diagram_is_the_transition_table() -> None:
    """docs/architecture.md's state diagram draws exactly :data:`NEXT` (bar staying put)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    diagram = page.split("stateDiagram-v2", 1)[1].split("```", 1)[0]
    drawn = {
        (before.strip(), after.split(":")[0].strip())
        for before, after in (line.split("-->") for line in diagram.splitlines() if "-->" in line)
        if before.strip() != "[*]"
    }
    table = {
        (b.value, a.value) for b, after in NEXT.items() for a in after
        if a != b and not (b in ENDED and a in ENDED)  # the final record, said in the text
    }
    assert drawn == table
