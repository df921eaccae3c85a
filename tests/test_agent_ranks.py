"""Which rank of a distributed job failed on its own and which only stopped because of it
(interactive/agent/ranks.py), from one rank's status as the session serves it."""

from __future__ import annotations

from typing import Any

from interactive.agent.ranks import blame, pointer

STOPPED = ("RuntimeError: stopped because rank 1 failed (IndexError: list index out of "
           "range); here: Connection closed by peer")


def status(own_error: str, peer_error: str, peer_state: str = "waiting") -> dict[str, Any]:
    return {"state": "waiting", "error": own_error, "attempt": 1,
            "rank": {"rank": 0, "local_rank": 0, "world_size": 2, "local_world_size": 2},
            "ranks": [{"local_rank": 1, "rank": 1, "state": peer_state, "error": peer_error,
                       "debug": {"host": "127.0.0.1", "port": 5679}}]}


def test_the_rank_that_failed_is_told_from_the_one_it_stopped_whichever_is_asked() -> None:
    seen_from_0 = blame(status(STOPPED, "IndexError: list index out of range"),
                        {5679: "local/rank-1"})
    assert seen_from_0 == {
        "failed_ranks": [{"rank": 1, "local_rank": 1, "session": "local/rank-1",
                          "error": "IndexError: list index out of range"}],
        "stopped_ranks": [{"rank": 0, "local_rank": 0, "this_session": True,
                           "because_rank": 1}]}
    seen_from_1 = {**status("IndexError: list index out of range", STOPPED),
                   "rank": {"rank": 1, "local_rank": 1}}
    seen_from_1["ranks"][0].update(rank=0, local_rank=0)
    told = blame(seen_from_1)
    assert [f["rank"] for f in told["failed_ranks"]] == [1]
    assert told["failed_ranks"][0]["this_session"] is True
    assert told["stopped_ranks"] == [{"rank": 0, "local_rank": 0, "because_rank": 1}]


def test_a_stopped_rank_points_at_the_failed_ranks_session_and_the_failed_one_does_not() -> None:
    said = pointer(status(STOPPED, "IndexError: boom"), {5679: "local/rank-1"})
    assert said is not None and "rank 1 failed" in said and "local/rank-1" in said
    assert pointer(status("IndexError: boom", STOPPED.replace("rank 1", "rank 0"))) is None


def test_a_culprit_on_another_pod_is_named_with_its_pod() -> None:
    other_pod = STOPPED.replace("rank 1 failed", "rank 3 on pod train-1 failed")
    told = blame(status(other_pod, other_pod))
    assert told["failed_ranks"] == [{"rank": 3, "pod": "train-1"}]
    assert [s["because_rank"] for s in told["stopped_ranks"]] == [3, 3]


def test_a_rank_that_resumed_or_ended_is_no_failure_and_a_single_process_has_no_ranks() -> None:
    assert blame(status("KeyError: 'x'", "IndexError: boom", peer_state="done")) == {
        "failed_ranks": [{"rank": 0, "local_rank": 0, "this_session": True,
                          "error": "KeyError: 'x'"}]}
    assert blame({"state": "waiting", "error": "KeyError: 'x'"}) == {}


def test_a_culprit_of_this_pod_that_resumed_is_not_named_again() -> None:
    told = blame({**status("IndexError: boom", STOPPED.replace("rank 1", "rank 0")),
                  "state": "done"})
    assert told == {"stopped_ranks": [{"rank": 1, "local_rank": 1, "because_rank": 0}]}


def test_the_pattern_reads_what_a_stopped_rank_says() -> None:
    """The words are the session's own (interactive/distributed/blame.py): if they change,
    this fails rather than the agent losing track of the failed rank."""
    from interactive.distributed.blame import Failure, reason

    for culprit, pod in ((Failure(3, "IndexError: boom", "train-1"), "train-1"),
                         (Failure(1, "IndexError: boom"), None)):
        told = blame(status(f"RuntimeError: {reason(culprit, False)}; here: closed", "x"))
        assert told["stopped_ranks"][0]["because_rank"] == culprit.rank
        assert ({"rank": culprit.rank, "pod": pod} in told["failed_ranks"]) == (pod is not None)
    unknown = blame(status(f"RuntimeError: {reason(None, True)}", "IndexError: boom"))
    assert unknown["stopped_ranks"] == [{"rank": 0, "local_rank": 0, "this_session": True}]
