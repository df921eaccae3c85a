"""Ray Train's ranks on the bug board, without Ray: the rounds of a rank's session, the
group's name, where a stopped rank was (the real thing runs in tests/test_ray_train.py)."""

from __future__ import annotations

import sys

from interactive.base.types import ExcInfo
from interactive.ray.bugs import FAILED, FIXED, OPEN, OWNER_TIMEOUT_SECONDS, WAIT, Board
from interactive.ray.train_group import group_name, stopped_at


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_ranks_session_posts_an_outcome_at_every_resume_and_only_its_owner_may() -> None:
    board = Board()
    assert board.claim("bug", "rank-1") == (OPEN, None)
    assert board.claim("bug", "rank-0") == (WAIT, "rank-1")
    board.settle("bug", FIXED, [], who="rank-1")  # resumed without a change
    assert board.latest("bug") == (1, FIXED, [], False)
    board.settle("bug", FIXED, [("x.py", "a", "b")], who="rank-0")  # not its session
    board.settle("bug", FIXED, [("x.py", "a", "c")])  # a task's session posts once
    assert board.latest("bug")[:3] == (1, FIXED, [])
    board.settle("bug", FIXED, [("x.py", "a", "b")], who="rank-1")  # the fixed resume
    assert board.latest("bug")[:3] == (2, FIXED, [("x.py", "a", "b")])
    board.settle("bug", FAILED, "aborted", who="rank-1")
    assert board.latest("bug")[:3] == (3, FAILED, "aborted")


def test_a_ranks_session_beats_on_after_a_round_and_is_gone_once_silent() -> None:
    clock = Clock()
    board = Board(clock)
    board.claim("bug", "rank-1")
    board.settle("bug", FIXED, [], who="rank-1")
    clock.now = OWNER_TIMEOUT_SECONDS + 1
    assert board.heartbeat("bug", "rank-1") == 0  # no one waits on a settled bug
    assert board.latest("bug")[3] is False
    clock.now += OWNER_TIMEOUT_SECONDS + 1
    assert board.latest("bug")[3] is True
    assert board.latest("never seen") == (0, WAIT, None, False)


def test_the_board_names_the_bug_that_broke_a_group() -> None:
    board = Board()
    assert board.breaker("10.0.0.1:29500") is None
    board.broke("10.0.0.1:29500", "train.py:train_func builtins.IndexError at train.py:35")
    assert board.breaker("10.0.0.1:29500").endswith("IndexError at train.py:35")  # type: ignore[union-attr]
    assert board.breaker("10.0.0.2:29500") is None


def test_a_group_is_named_by_its_store_address_the_same_on_every_rank() -> None:
    assert group_name({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}) == "10.0.0.1:29500"
    assert group_name({}) == "job"


def _backward() -> None:
    raise RuntimeError("Connection closed by peer")


def test_a_stopped_rank_says_where_in_its_own_code_it_was() -> None:
    try:
        _backward()
    except RuntimeError:
        kind, error, tb = sys.exc_info()
        assert kind is not None and error is not None
        excinfo: ExcInfo = (kind, error, tb)
    where = stopped_at(excinfo)
    assert where.startswith("_backward (test_ray_train_group.py:")
    assert where.endswith(': raise RuntimeError("Connection closed by peer")')
