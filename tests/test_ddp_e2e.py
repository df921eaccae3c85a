"""DistributedDataParallel under torchrun (gloo, CPU, 2 ranks), as pytorch/examples writes it.

A bug only rank 1 hits (its shard holds the dataset's last index, one past the
data) while rank 0 is in DDP's gradient all-reduce, and a bug both ranks hit:
every rank ends up in a session, one resume after the fix, and the job ends
with the weights the fixed script gives without podcode.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import torchrun_job
from tests.torchrun_job import (
    Torchrun,
    checksums,
    finish,
    fix,
    job_with_bug,
    post,
    resume_and_finish,
    resume_one_by_one,
)

pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "ddp_examples" / "multigpu_torchrun.py"
SCRIPT = ("multigpu_torchrun.py", "2", "1")
ONE_RANK = ("for _ in range(size)]", "for _ in range(size - 1)]")
"""Rank 1's shard ends at index 255, one past the data: IndexError at its last step."""
ALL_RANKS = ("loss {total:.4f}", "loss {total.item():.4f}")
"""``.item()`` on a float: AttributeError on every rank after its first epoch."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off."""
    return torchrun_job.reference(tmp_path_factory.mktemp("reference"), EXAMPLE, SCRIPT)


@pytest.fixture
def job(tmp_path: Path, podcode_home: Path, request: pytest.FixtureRequest) -> Iterator[Torchrun]:
    bug, at_top = request.param
    script = (*SCRIPT, "--init-at-top") if at_top else SCRIPT
    with job_with_bug(tmp_path / "workspace", podcode_home, EXAMPLE, bug, script) as run:
        yield run


@pytest.mark.parametrize(
    "job", [(ONE_RANK, False), (ONE_RANK, True)], ids=["init-in-main", "init-at-top"],
    indirect=True,
)
def test_rank_1_fails_while_rank_0_is_in_backward_and_both_resume_to_the_fixed_result(
    job: Torchrun, reference: str
) -> None:
    failed = job.wait_waiting(1)
    assert failed["error"].startswith("IndexError: list index out of range")
    victim = job.wait_waiting(0)  # broken out of DDP's all-reduce, not after gloo's 30 minutes
    assert victim["error"].startswith("RuntimeError") and "closed by peer" in victim["error"]
    # Its session names the bug it waits on: rank 1's, not one of its own.
    assert "stopped because rank 1 failed (IndexError: list index out of range)" in victim["error"]
    output = resume_and_finish(job, ONE_RANK)
    assert "gloo connections shut down" in output
    # A group formed in main is formed again by main's re-run; one formed before it, by podcode.
    said = "it is re-formed when" if "--init-at-top" in job.script else "the task forms it again"
    assert said in output
    assert checksums(output) == [reference], output
    assert "initialize the default process group twice" not in output


@pytest.mark.parametrize(
    "job", [(ONE_RANK, False), (ONE_RANK, True)], ids=["init-in-main", "init-at-top"],
    indirect=True,
)
def test_rank_1_resumed_before_rank_0_waits_for_it_and_both_end_with_the_fixed_result(
    job: Torchrun, reference: str
) -> None:
    """The resume reaches rank 1's session alone, then rank 0's once rank 1 has left its own:
    rank 1 waits for rank 0 before it forms the group again (in main) or podcode does."""
    output = resume_one_by_one(job, ONE_RANK, (1, 0))
    assert "rank 1 waits for the other ranks to resume" in output
    assert checksums(output) == [reference], output


@pytest.mark.parametrize(
    "job", [(ALL_RANKS, False), (ALL_RANKS, True)], ids=["init-in-main", "init-at-top"],
    indirect=True,
)
def test_a_bug_every_rank_hits_resumes_to_the_fixed_result(job: Torchrun, reference: str) -> None:
    for rank in (0, 1):
        assert job.wait_waiting(rank)["error"].startswith("AttributeError")
    output = resume_and_finish(job, ALL_RANKS)
    assert checksums(output) == [reference], output
    assert "EADDRINUSE" not in output


@pytest.mark.parametrize(
    "job", [(ONE_RANK, False), (ONE_RANK, True)], ids=["init-in-main", "init-at-top"],
    indirect=True,
)
def test_a_resume_without_the_fix_fails_again_and_the_next_one_ends_the_job(
    job: Torchrun, reference: str
) -> None:
    """Generation after generation: the group is formed again each time without colliding
    with the ones before (no EADDRINUSE, no stale gloo address)."""
    ranks = [job.wait_waiting(0), job.wait_waiting(1)]
    assert post(ranks[1], "/api/resume")[0] == 202  # nothing fixed: rank 1 fails again
    again = [job.wait_waiting(rank, attempt=ranks[rank]["attempt"] + 1) for rank in (0, 1)]
    assert again[1]["error"].startswith("IndexError")
    assert "stopped because rank 1 failed" in again[0]["error"]
    fix(job.workspace / EXAMPLE.name, ONE_RANK)
    assert post(again[0], "/api/resume")[0] == 202
    output = finish(job)
    assert checksums(output) == [reference], output


@pytest.fixture
def four_ranks(tmp_path: Path, podcode_home: Path) -> Iterator[Torchrun]:
    with job_with_bug(tmp_path / "workspace", podcode_home, EXAMPLE, ONE_RANK, SCRIPT,
                      nproc=4) as run:
        yield run


@pytest.fixture(scope="module")
def reference_4(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off, on 4 ranks."""
    return torchrun_job.reference(tmp_path_factory.mktemp("reference-4"), EXAMPLE, SCRIPT,
                                  nproc=4)


def test_four_ranks_one_fails_and_all_resume_to_the_fixed_result(
    reference_4: str, four_ranks: Torchrun
) -> None:
    """With 4 ranks the last index is rank 3's: ranks 0 to 2 are stopped in DDP's all-reduce
    and wait on its bug; one resume ends the job with the 4-rank podcode-off weights."""
    failed = four_ranks.wait_waiting(3)
    assert failed["error"].startswith("IndexError: list index out of range")
    victims = [four_ranks.wait_waiting(rank) for rank in (0, 1, 2)]
    for victim in victims:
        assert "stopped because rank 3 failed (IndexError" in victim["error"], victim["error"]
    fix(four_ranks.workspace / EXAMPLE.name, ONE_RANK)
    assert post(victims[0], "/api/resume")[0] == 202
    output = finish(four_ranks, timeout=150)
    assert checksums(output) == [reference_4], output
