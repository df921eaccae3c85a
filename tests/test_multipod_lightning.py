"""PyTorch Lightning's DDP over two pods: one session for the bug, one resume for every pod.

Lightning's BoringModel (``tests/ddp_examples/lightning_boring.py``) with
``Trainer(num_nodes=2, devices=2)``, started by two torchrun agents on one machine that stand
for two pods (``--nnodes 2``, a node rank each, 2 ranks each): Lightning finds torchrun's
environment and starts no process of its own. Each pod has its own copy of the code,
``PODCODE_HOME``, ports and ``POD_NAME``, and the job's secret; DDP over gloo; the pods agree
through the job's own rendezvous store. A bug only global rank 3 (the second pod's local
rank 1) hits. The result is compared with the fixed script run the same way with podcode off
(one agent of 4 ranks does not do: Lightning takes its local ranks 2 and 3 for devices that
``devices=2`` lacks).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import torchrun_job
from tests.torchrun_job import Torchrun, agent, checksums, fix, free_port, get, post, with_bug
from tests.waiting import wait_until

pytest.importorskip("lightning.pytorch", reason="lightning is not installed (the test extra)")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "ddp_examples" / "lightning_boring.py"
SCRIPT = (EXAMPLE.name, "--num-nodes", "2")
RANK_3 = ("torch.randn(length, size", "torch.randn(length - 1, size")
"""The data one row short of the dataset's length. Of 4 ranks (Lightning's sampler, shuffled
with the seed 1), global rank 3 draws the missing index 63 at its first step (IndexError),
while ranks 0 to 2 draw rows that exist and wait in DDP's gradient all-reduce. (Rank 2 would
draw index 63 in the second epoch, which the failure never lets it reach.)"""
PODS = ("lightning-0", "lightning-1")
SECRET = "a-secret-the-job's-pods-share-0123456789"
ERROR = "IndexError: index 63 is out of bounds"
NAMED = f"stopped because rank 3 on pod {PODS[1]} failed ({ERROR}"


def start_pods(tmp_path: Path, env: dict[str, str]) -> list[Torchrun]:
    """The two agents, each in ``tmp_path/<pod>/workspace`` with its own copy of the script
    (as it already is there)."""
    port = free_port()
    return [
        Torchrun(
            tmp_path / pod / "workspace",
            tmp_path / pod / "home",
            SCRIPT,
            env={"POD_NAME": pod, **env},
            command=agent(node, 2, 2, port),
        )
        for node, pod in enumerate(PODS)
    ]


def stop(pods: list[Torchrun]) -> None:
    for job in pods:
        job.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off, on the same two agents."""
    folder = tmp_path_factory.mktemp("reference")
    for pod in PODS:
        (folder / pod / "workspace").mkdir(parents=True)
        (folder / pod / "workspace" / EXAMPLE.name).write_bytes(EXAMPLE.read_bytes())
    pods = start_pods(folder, {"PODCODE_ENABLE": "0"})
    try:
        wait_until(lambda: checksums(pods[0].output()), "the reference's checksum", 240)
        codes = [exit_code(job, 60) for job in pods]
    finally:
        stop(pods)
    output = pods[0].output()  # rank 0's pod prints the checksum
    found = checksums(output)
    assert len(found) == 1, output
    crashed = any(torchrun_job.TEARDOWN_CRASH in job.output() for job in pods)
    for job, code in zip(pods, codes):  # gloo's crash at exit, after the result, is torch's;
        # an agent whose peer crashed so waits in torchrun's exit barrier (5 minutes)
        assert code == 0 or crashed, job.output()
    return found[0]


def exit_code(job: Torchrun, timeout: float) -> int | None:
    """The agent's exit code, or None if it has not exited within ``timeout``."""
    try:
        return job.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[list[Torchrun]]:
    for pod in PODS:
        with_bug(tmp_path / pod / "workspace", RANK_3, EXAMPLE)
    jobs = start_pods(tmp_path, {"PODCODE_JOB_SECRET": SECRET, "PODCODE_IDE": "none"})
    try:
        yield jobs
    finally:
        stop(jobs)


def every_rank_waits(pods: list[Torchrun]) -> list[dict[str, Any]]:
    """The sessions' records, by global rank: each pod's local ranks 0 and 1."""
    return [job.wait_waiting(local, timeout=180) for job in pods for local in (0, 1)]


def test_rank_3_on_the_second_pod_fails_and_one_resume_on_the_first_pod_ends_the_job(
    pods: list[Torchrun], reference: str
) -> None:
    records = every_rank_waits(pods)
    assert [r["rank"]["rank"] for r in records] == [0, 1, 2, 3]
    assert {r["rank"]["world_size"] for r in records} == {4}
    assert records[3]["error"].startswith(ERROR), records[3]["error"]
    for victim in records[:2]:  # the first pod's ranks name the rank and its pod
        assert NAMED in victim["error"], victim["error"]
    statuses = [get(record, "/api/status")["job"] for record in records]
    for job in statuses:
        assert job["session_pod"] == PODS[1], job
        assert job["failed_rank"] == 3 and job["failed_pod"] == PODS[1], job
        assert job["error"].startswith(ERROR), job
    assert [job["serves_session"] for job in statuses] == [False, False, True, True]
    assert f"the job's session is on pod {PODS[1]}" in pods[0].output()

    script = EXAMPLE.name
    fix(pods[1].workspace / script, RANK_3)  # the fix, in the failing pod's copy only
    status, answer = post(records[0], "/api/resume")  # one resume, on the other pod
    assert status == 202, answer
    output = ""
    for job in pods:
        output += torchrun_job.finish(job, 180)
    assert checksums(output) == [reference], output
    fixed = (pods[1].workspace / script).read_bytes()
    assert RANK_3[1].encode() not in fixed
    assert (pods[0].workspace / script).read_bytes() == fixed  # the other pod's own copy
    assert f"pod {PODS[1]} resumes the job's session, as asked from pod {PODS[0]}" in (
        pods[1].output()
    )
    assert f"pod {PODS[0]} applies the fix to {script}" in pods[0].output()
