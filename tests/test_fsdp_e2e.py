"""FSDP2 (``fully_shard`` over a CPU device mesh, gloo) under torchrun, 2 ranks.

``tests/ddp_examples/fsdp2_cpu.py``: a bug only rank 1 hits while rank 0 is in FSDP's
all-gather or reduce-scatter, and a bug both ranks hit; every rank in a session, one fix and one
resume, and rank 0 prints the full weights the fixed script gives without podcode.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import torchrun_job
from tests.torchrun_job import (
    Torchrun,
    checksums,
    job_with_bug,
    resume_and_finish,
)

pytest.importorskip("torch.distributed.fsdp", reason="this torch has no FSDP")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "ddp_examples" / "fsdp2_cpu.py"
SCRIPT = (EXAMPLE.name,)
ONE_RANK = ("for _ in range(size)]", "for _ in range(size - 1)]")
"""Rank 1's shard ends at index 127, one past the data: IndexError at its last step."""
ALL_RANKS = ("loss {total:.4f}", "loss {total.item():.4f}")
"""``.item()`` on a float: AttributeError on every rank after its first epoch."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off."""
    return torchrun_job.reference(tmp_path_factory.mktemp("reference"), EXAMPLE, SCRIPT)


@pytest.fixture
def job(tmp_path: Path, podcode_home: Path, request: pytest.FixtureRequest) -> Iterator[Torchrun]:
    with job_with_bug(tmp_path / "workspace", podcode_home, EXAMPLE, request.param,
                      SCRIPT) as run:
        yield run


@pytest.mark.parametrize("job", [ONE_RANK], indirect=True)
def test_rank_1_fails_while_rank_0_is_in_an_fsdp_collective(job: Torchrun, reference: str) -> None:
    assert job.wait_waiting(1)["error"].startswith("IndexError: list index out of range")
    victim = job.wait_waiting(0)
    assert "stopped because rank 1 failed (IndexError" in victim["error"], victim["error"]
    output = resume_and_finish(job, ONE_RANK)
    assert "the task forms it again" in output
    assert checksums(output) == [reference], output


@pytest.mark.parametrize("job", [ALL_RANKS], indirect=True)
def test_a_bug_every_rank_hits_resumes_to_the_fixed_result(job: Torchrun, reference: str) -> None:
    for rank in (0, 1):
        assert job.wait_waiting(rank)["error"].startswith("AttributeError")
    output = resume_and_finish(job, ALL_RANKS)
    assert checksums(output) == [reference], output
