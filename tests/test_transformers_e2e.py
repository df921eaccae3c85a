"""``transformers.Trainer`` under torchrun (gloo, CPU, 2 ranks) on a tiny BERT built from a config.

``tests/ddp_examples/transformers_tiny.py`` with ``@vscode`` on ``main``, which builds the
``TrainingArguments`` (Accelerate's singleton state forms the group there, once per process)
and the Trainer and calls ``trainer.train()``. A bug one rank hits while the other is in DDP's
all-reduce: both ranks in a session, one fix and one resume, and rank 0 prints the weights the
fixed script gives without podcode.
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
)

pytest.importorskip("transformers", reason="transformers is not installed (the test extra)")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "ddp_examples" / "transformers_tiny.py"
SCRIPT = (EXAMPLE.name,)
ONE_RANK = ("for _ in range(size)]", "for _ in range(size - 1)]")
"""The data one short of the dataset's length: the rank whose shuffled shard holds the last
index (rank 0 with the Trainer's seed 0) fails in its data loader."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off."""
    return torchrun_job.reference(tmp_path_factory.mktemp("reference"), EXAMPLE, SCRIPT)


@pytest.fixture
def job(tmp_path: Path, podcode_home: Path) -> Iterator[Torchrun]:
    with job_with_bug(tmp_path / "workspace", podcode_home, EXAMPLE, ONE_RANK, SCRIPT) as run:
        yield run


def test_one_rank_fails_and_both_resume_to_the_fixed_result(job: Torchrun, reference: str) -> None:
    failed = job.wait_waiting(0, timeout=150)
    assert failed["error"].startswith("IndexError: list index out of range"), failed["error"]
    victim = job.wait_waiting(1)
    assert "stopped because rank 0 failed (IndexError" in victim["error"], victim["error"]
    fix(job.workspace / EXAMPLE.name, ONE_RANK)
    assert post(victim, "/api/resume")[0] == 202
    output = finish(job, timeout=150)
    assert "it is re-formed when the session resumes" in output  # Accelerate's state: once
    assert checksums(output) == [reference], output
