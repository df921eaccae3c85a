from __future__ import annotations

import pytest

from interactive.base.errors import RankError
from interactive.distributed.ranks import RankInfo, detect


def test_a_plain_process_is_rank_zero_of_one() -> None:
    info = detect({})
    assert info == RankInfo() and not info.distributed


def test_torchrun_and_pytorchjob_variables() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    info = detect(env)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (3, 4, 1, 2)
    assert info.distributed and info.label == "rank 3/4 (local 1)"


def test_a_pytorchjob_without_local_variables_is_one_rank_per_pod() -> None:
    info = detect({"RANK": "2", "WORLD_SIZE": "3"})
    assert (info.rank, info.local_rank, info.local_world_size) == (2, 0, 1)
    assert detect({"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "1"}).local_world_size == 2


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {
                "OMPI_COMM_WORLD_RANK": "5",
                "OMPI_COMM_WORLD_SIZE": "8",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
            },
            RankInfo(5, 8, 1, 4),
        ),
        (
            {
                "SLURM_PROCID": "1",
                "SLURM_NTASKS": "4",
                "SLURM_LOCALID": "1",
                "SLURM_NTASKS_PER_NODE": "2(x2)",
            },
            RankInfo(1, 4, 1, 2),
        ),
    ],
    ids=["open-mpi", "slurm"],
)
def test_open_mpi_and_slurm(env: dict[str, str], expected: RankInfo) -> None:
    assert detect(env) == expected


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "outside WORLD_SIZE=2"),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"},
            "LOCAL_RANK",
        ),
    ],
)
def test_variables_that_do_not_add_up_are_named(env: dict[str, str], named: str) -> None:
    with pytest.raises(RankError, match=named.replace("(", r"\(")):
        detect(env)


class Group:
    """What ``ranks.from_group`` reads of a process group (a real one: test_gloo_sockets)."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return self.world_size


def test_without_rank_variables_the_group_says_and_every_rank_is_local() -> None:
    """torch.multiprocessing.spawn sets nothing: one node, local rank = rank."""
    from interactive.distributed.ranks import from_group

    info = from_group(Group(1, 2), {})
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (1, 2, 1, 2)


def test_lightnings_local_rank_is_kept_when_the_group_gives_the_rest() -> None:
    """Lightning's launcher sets LOCAL_RANK and WORLD_SIZE only."""
    from interactive.distributed.ranks import from_group

    info = from_group(Group(3, 4), {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (info.rank, info.local_rank, info.local_world_size) == (3, 1, 2)
    with pytest.raises(RankError, match="LOCAL_RANK=2 is outside LOCAL_WORLD_SIZE=2"):
        from_group(Group(0, 4), {"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"})
