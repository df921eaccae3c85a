"""Hugging Face Accelerate on 2 CPU ranks: ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu
--num_processes 2`` (Accelerate's launcher, torchrun inside it).

Accelerate's quicktour loop (``tests/ddp_examples/accelerate_quicktour.py``) with ``@vscode`` on
its ``training_function``. Accelerate's state is a singleton that forms the process group at the
first ``Accelerator()`` only, so podcode re-forms the group before the re-call, whether the
``Accelerator`` is made inside the function (as Accelerate's examples do) or before it. A bug only
rank 1 hits and a bug both ranks hit: every rank ends up in a session, one resume after the fix,
and the main process prints the weights the fixed script gives without podcode.
"""

from __future__ import annotations

import sys
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

pytest.importorskip("accelerate", reason="accelerate is not installed (the test extra)")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "ddp_examples" / "accelerate_quicktour.py"
SCRIPT = (EXAMPLE.name,)
ENV = {"ACCELERATE_USE_CPU": "true"}
ONE_RANK = ("for _ in range(size)]", "for _ in range(size - 1)]")
"""The data one short of the dataset's length: rank 1's last batch (Accelerate gives each rank
every other batch) holds the missing index, IndexError while rank 0 is in a collective."""
ALL_RANKS = ("loss {total:.4f}", "loss {total.item():.4f}")
"""``.item()`` on a float: AttributeError on every rank after its first epoch."""


def launcher() -> tuple[str, ...]:
    """``accelerate launch`` for 2 processes on a free port (``--multi_gpu`` is Accelerate's
    name for one process per device, CPUs included; ``--num_processes 2`` alone runs one)."""
    return (sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
            "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
            "--dynamo_backend", "no", "--main_process_port", str(torchrun_job.free_port()))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off."""
    return torchrun_job.reference(tmp_path_factory.mktemp("reference"), EXAMPLE, SCRIPT,
                                  launcher(), ENV)


@pytest.fixture
def job(tmp_path: Path, podcode_home: Path, request: pytest.FixtureRequest) -> Iterator[Torchrun]:
    bug, *options = request.param
    with job_with_bug(tmp_path / "workspace", podcode_home, EXAMPLE, bug, (*SCRIPT, *options),
                      env=ENV, command=launcher()) as run:
        yield run


@pytest.mark.parametrize(
    "job", [(ONE_RANK,), (ONE_RANK, "--accelerator-at-top")], ids=["inside", "at-top"],
    indirect=True,
)
def test_rank_1_fails_and_both_resume_on_a_group_podcode_forms_again(
    job: Torchrun, reference: str
) -> None:
    failed = job.wait_waiting(1)
    assert failed["error"].startswith("IndexError: list index out of range"), failed["error"]
    victim = job.wait_waiting(0)
    assert "stopped because rank 1 failed (IndexError" in victim["error"], victim["error"]
    output = resume_and_finish(job, ONE_RANK)
    # Accelerate never forms its group again, even when Accelerator() is made in the task.
    assert "it is re-formed when the session resumes" in output
    assert "the task forms it again" not in output
    assert checksums(output) == [reference], output


@pytest.mark.parametrize("job", [(ALL_RANKS,)], indirect=True)
def test_a_bug_every_rank_hits_resumes_to_the_fixed_result(job: Torchrun, reference: str) -> None:
    for rank in (0, 1):
        assert job.wait_waiting(rank)["error"].startswith("AttributeError")
    output = resume_and_finish(job, ALL_RANKS)
    assert checksums(output) == [reference], output
    assert "EADDRINUSE" not in output
