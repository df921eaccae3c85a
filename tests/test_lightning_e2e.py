"""PyTorch Lightning's DDP on 2 CPU ranks, started as ``python train.py`` (Lightning's launcher).

Lightning's BoringModel (``tests/ddp_examples/lightning_boring.py``) with ``@vscode`` on the
function that calls ``trainer.fit``: Lightning runs the script again for rank 1 with
``LOCAL_RANK`` and ``WORLD_SIZE`` only (no ``RANK``), so podcode reads the ranks from the process
group at the failure. A bug only rank 1 hits and a bug both ranks hit: every rank ends up in a
session, one resume after the fix, and rank 0 prints the weights the fixed script gives without
podcode.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import torchrun_job
from tests.torchrun_job import (
    Torchrun,
    checksums,
    job_with_bug,
    post,
    resume_and_finish,
    resume_one_by_one,
)

pytest.importorskip("lightning.pytorch", reason="lightning is not installed (the test extra)")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "ddp_examples" / "lightning_boring.py"
SCRIPT = (EXAMPLE.name,)
PYTHON = (sys.executable,)
ONE_RANK = ("torch.randn(length, size", "torch.randn(length - 1, size")
"""The data one row short of the dataset's length: rank 1 draws the missing index at its second
step (IndexError) while rank 0 waits in DDP's gradient all-reduce."""
ALL_RANKS = ("loss = self(batch).sum()", "loss = self(batch).sum(dim=2)")
"""A dimension the output lacks: IndexError in ``training_step`` on every rank."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off."""
    return torchrun_job.reference(tmp_path_factory.mktemp("reference"), EXAMPLE, SCRIPT,
                                  PYTHON)


@pytest.fixture
def job(tmp_path: Path, podcode_home: Path, request: pytest.FixtureRequest) -> Iterator[Torchrun]:
    bug, *options = request.param
    with job_with_bug(tmp_path / "workspace", podcode_home, EXAMPLE, bug, (*SCRIPT, *options),
                      command=PYTHON) as run:
        yield run


@pytest.mark.parametrize("job", [(ONE_RANK,)], indirect=True)
def test_rank_1_fails_while_rank_0_is_in_backward_and_both_resume_to_the_fixed_result(
    job: Torchrun, reference: str
) -> None:
    failed = job.wait_waiting(1)
    assert failed["error"].startswith("IndexError: index 63 is out of bounds"), failed["error"]
    victim = job.wait_waiting(0)  # broken out of DDP's all-reduce
    assert "stopped because rank 1 failed (IndexError" in victim["error"], victim["error"]
    assert failed["rank"]["rank"] == 1 and victim["rank"]["world_size"] == 2  # from the group
    output = resume_and_finish(job, ONE_RANK)
    assert "the task forms it again" in output  # Lightning forms its group in trainer.fit
    assert checksums(output) == [reference], output
    assert "initialize the default process group twice" not in output
    assert "runs inside Lightning's training loop" not in output  # run calls trainer.fit


@pytest.mark.parametrize("order", [(1, 0), (0, 1)], ids=["rank-1-first", "rank-0-first"])
@pytest.mark.parametrize("job", [(ONE_RANK,)], indirect=True)
def test_each_rank_resumed_on_its_own_in_either_order_ends_with_the_fixed_result(
    job: Torchrun, reference: str, order: tuple[int, int]
) -> None:
    """The resume reaches one rank's session, and the other's only once the first has left
    its own: the first waits for the second before it forms the group again, on a store that
    the failed attempt's teardown does not close under it."""
    assert "stopped because rank 1 failed" in job.wait_waiting(0)["error"]
    output = resume_one_by_one(job, ONE_RANK, order)
    assert checksums(output) == [reference], output
    assert f"rank {order[0]} waits for the other ranks to resume" in output
    assert "Failed to recv" not in output


@pytest.mark.parametrize("job", [(ALL_RANKS,)], indirect=True)
def test_a_bug_every_rank_hits_resumes_to_the_fixed_result(job: Torchrun, reference: str) -> None:
    for rank in (0, 1):
        assert job.wait_waiting(rank)["error"].startswith("IndexError: Dimension out of range")
    output = resume_and_finish(job, ALL_RANKS)
    assert checksums(output) == [reference], output
    assert "EADDRINUSE" not in output


@pytest.mark.parametrize("job", [(ALL_RANKS, "--decorate-step")], indirect=True)
def test_on_training_step_the_session_says_the_run_cannot_go_on(job: Torchrun) -> None:
    """``@vscode`` on ``training_step``: Lightning's DDP wrapper, built before the step, holds the
    group that the failure breaks. The session opens, and says that a resume cannot go on."""
    for rank in (0, 1):
        assert job.wait_waiting(rank)["error"].startswith("IndexError")
    assert "runs inside Lightning's training loop" in job.output()
    assert post(job.wait_waiting(0), "/api/abort")[0] == 202
    try:
        assert job.proc.wait(60) != 0
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the aborted job never ended:\n{job.output()}") from None
