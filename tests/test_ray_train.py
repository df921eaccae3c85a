"""Ray Train's own ``torch_linear_example.py`` (``TorchTrainer``, two CPU workers,
``prepare_model``: DDP over gloo) on a real local cluster, with podcode on.

A bug only rank 1 hits (an off-by-one in the dataset that only its shard reaches, while
rank 0 is in DDP's gradient all-reduce) and one both ranks hit (``.item()`` on a float):
one session per bug, the other worker waiting on it through the job's bug board (not
hung in a collective), one fix and one resume, and ``TorchTrainer.fit()`` returns the
final loss and weights of the fixed example run with podcode off.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ray_cluster import Cluster, ray_cluster
from tests.ray_train_job import (
    ALL_RANKS,
    EXAMPLE,
    ONE_RANK,
    Reference,
    TrainJob,
    result,
    same_training,
)
from tests.torchrun_job import fix
from tests.waiting import wait_until

pytest.importorskip("ray.train.torch")
pytestmark = pytest.mark.slow

EPOCHS = 2
"""The example's ``--epochs`` in every run here, the reference's too (its default is 3): both
bugs strike in the first epoch, and the fixed run still trains past it."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Room for two jobs of two workers at once: the reference beside a test's job."""
    with ray_cluster(cpus=4, prestart=False) as running:
        yield running


@pytest.fixture(scope="module")
def fixed(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    """The fixed example run with podcode off: it starts with the first test that needs it
    and trains beside that test's job; ``fixed()`` is its result, awaited where compared."""
    reference = Reference(cluster, tmp_path_factory.mktemp("reference"), EPOCHS)
    try:
        yield reference
    finally:
        reference.stop()


def test_rank_1_fails_in_its_shard_and_rank_0_waits_on_its_bug_then_both_train_to_the_result(
    cluster: Cluster, tmp_path: Path, fixed: Reference
) -> None:
    """The group runs again whole at every resume, fixed or not: a resume without the fix
    re-runs rank 0 too, both are stopped again, and the fixed resume re-forms the group
    once more (no hang) and trains to the fixed example's result."""
    job = TrainJob(cluster, tmp_path, ONE_RANK, epochs=EPOCHS)
    try:
        (session,) = job.in_sessions(1, 1)
        assert session["rank"]["rank"] == 1, session
        assert session["error"].startswith("IndexError: index 1000 is out of bounds"), session
        # Rank 0 was broken out of DDP's all-reduce; it says where, and whose bug it waits on.
        assert "this rank was stopped at train_epoch (torch_linear_example.py" in job.output()
        assert "loss.backward()" in job.output()
        assert "stopped because rank 1 failed (IndexError" in job.output()
        workspace = Path(session["workspace"])
        assert workspace in cluster.copies(), "the session names the node's working_dir copy"
        job.podcode("resume")  # nothing changed
        (again,) = wait_until(lambda: job.waiting(attempt=session["attempt"] + 1),
                              "the session open again", 90, 0.2)
        assert again["error"].startswith("IndexError"), again
        fix(Path(again["workspace"]) / EXAMPLE.name, ONE_RANK)  # edited where it says
        assert "LinearDataset.__getitem__" in job.podcode("resume")
        output = job.finish()
    finally:
        job.stop()
    assert output.count("opening a debug session") == 1, "one bug, one session"
    assert "re-forming the process group (gloo, generation 2)" in output
    assert same_training(result(output), fixed()), (result(output), fixed())


def test_a_bug_both_ranks_hit_opens_one_session_and_a_fix_pushed_from_the_checkout_ends_it(
    cluster: Cluster, tmp_path: Path, fixed: Reference
) -> None:
    job = TrainJob(cluster, tmp_path, ALL_RANKS, epochs=EPOCHS)
    try:
        (session,) = job.in_sessions(1, 1)
        assert session["error"] == "AttributeError: 'float' object has no attribute 'item'"
        fix(job.script, ALL_RANKS)  # in the user's own checkout, then pushed
        said = job.podcode("resume", "--push", str(job.script),
                           "--local-root", str(job.script.parent))
        assert "pushed 1 file(s)" in said and "__main__.train_func" in said, said
        output = job.finish()
    finally:
        job.stop()
    assert output.count("opening a debug session") == 1, "one bug, one session"
    assert "EADDRINUSE" not in output
    assert same_training(result(output), fixed()), (result(output), fixed())


def test_an_aborted_session_ends_every_worker_and_fit_raises_the_bug(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Abort: the session's worker raises its exception, the worker waiting on the board
    raises its own with a note, and ``fit()`` raises in the driver (nothing waits on)."""
    job = TrainJob(cluster, tmp_path, ALL_RANKS, epochs=EPOCHS)
    try:
        job.in_sessions(1, 1)
        job.podcode("abort")
        job.process.wait(120)
    finally:
        job.stop()
    output = job.output()
    assert job.process.returncode != 0, output[-4000:]
    assert "the session for this bug ended without a fix" in output, output[-4000:]
    assert "AttributeError: 'float' object has no attribute 'item'" in output.split(
        "Traceback")[-1], output[-4000:]
