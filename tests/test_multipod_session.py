"""One job over two pods: one session for the bug, one resume for every pod.

Two torchrun agents on one machine stand for two pods (``--nnodes 2``, a node rank each,
2 ranks each), each with its own copy of the code, ``PODCODE_HOME``, ports and
``POD_NAME``, and the job's secret (``PODCODE_JOB_SECRET``, as a Kubernetes Secret would
give it); DDP over gloo; no ``PODCODE_STORE``: the pods agree through the job's own
rendezvous store. A bug only global rank 2 (the second pod's local rank 0) hits. Each
job is compared with the fixed program run with podcode off (4 ranks: the same ranks,
the same data, the same result).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import torchrun_job
from tests.torchrun_job import Torchrun, agent, checksums, fix, free_port, get, post, with_bug

EXAMPLE = Path(__file__).parent / "ddp_examples" / "multigpu_torchrun.py"
SCRIPT = ("multigpu_torchrun.py", "2", "1")
RANK_2 = ("return self.data[index]", "return self.data[index if index != 254 else len(self.data)]")
"""Index 254 is global rank 2's last sample (of 4 ranks): read past the data, IndexError."""
PODS = ("train-multi-0", "train-multi-1")
SECRET = "a-secret-the-job's-pods-share-0123456789"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("torch.distributed")
    return torchrun_job.reference(tmp_path_factory.mktemp("reference-4"), EXAMPLE, SCRIPT,
                                  nproc=4)


def start_pods(tmp_path: Path, env: dict[str, str] | None = None) -> list[Torchrun]:
    port = free_port()
    jobs = []
    for node, pod in enumerate(PODS):
        folder = tmp_path / pod
        with_bug(folder / "workspace", RANK_2, EXAMPLE)
        jobs.append(Torchrun(folder / "workspace", folder / "home", SCRIPT,
                             env={"POD_NAME": pod, "PODCODE_JOB_SECRET": SECRET,
                                  "PODCODE_IDE": "none", **(env or {})},
                             command=(*agent(node, 2, 2, port),)))
    return jobs


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[list[Torchrun]]:
    pytest.importorskip("torch.distributed")
    jobs = start_pods(tmp_path)
    try:
        yield jobs
    finally:
        for job in jobs:
            job.stop()


def every_rank_waits(pods: list[Torchrun]) -> list[dict[str, Any]]:
    return [job.wait_waiting(local) for job in pods for local in (0, 1)]


def finished(pods: list[Torchrun], timeout: float = 120) -> str:
    output = ""
    for job in pods:
        output += torchrun_job.finish(job, timeout)
    return output


def test_the_failing_pod_serves_the_job_session_and_the_other_says_where(
        pods: list[Torchrun]) -> None:
    records = every_rank_waits(pods)
    statuses = [get(record, "/api/status") for record in records]
    for status in statuses:
        job = status["job"]
        assert job["session_pod"] == PODS[1], job
        assert job["failed_rank"] == 2 and job["failed_pod"] == PODS[1], job
        assert job["error"].startswith("IndexError"), job
    assert [s["job"]["serves_session"] for s in statuses] == [False, False, True, True]
    assert f"the job's session is on pod {PODS[1]}" in pods[0].output()
    assert post(records[0], "/api/abort")[0] == 202  # one abort, on the other pod
    for job in pods:
        try:
            code = job.proc.wait(90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the aborted job never ended:\n{job.output()}") from None
        assert code != 0, job.output()


@pytest.mark.parametrize("where", ["failing pod", "other pod"])
def test_one_resume_carries_the_fix_to_every_pod_and_the_job_ends_with_its_result(
        pods: list[Torchrun], reference: str, where: str) -> None:
    records = every_rank_waits(pods)
    fix(pods[1].workspace / SCRIPT[0], RANK_2)  # the fix, in the failing pod's copy only
    started = time.monotonic()
    target = records[2] if where == "failing pod" else records[0]
    status, answer = post(target, "/api/resume")
    assert status == 202, answer
    output = finished(pods)
    assert checksums(output) == [reference], output
    fixed = (pods[1].workspace / SCRIPT[0]).read_bytes()
    assert (pods[0].workspace / SCRIPT[0]).read_bytes() == fixed  # the other pod's own copy
    assert f"pod {PODS[0]} applies the fix to {SCRIPT[0]}" in pods[0].output()
    assert time.monotonic() - started < 120


def test_a_pod_whose_copy_differs_refuses_the_fix_and_names_the_file(
        pods: list[Torchrun]) -> None:
    records = every_rank_waits(pods)
    fix(pods[1].workspace / SCRIPT[0], RANK_2)
    other = pods[0].workspace / SCRIPT[0]
    other.write_text(other.read_text() + "\n# a local change\n")
    assert post(records[2], "/api/resume")[0] == 202
    deadline = time.monotonic() + 60
    line = f"pod {PODS[0]} does not apply the fix to {SCRIPT[0]}"
    while line not in pods[0].output():
        assert time.monotonic() < deadline, pods[0].output()
        time.sleep(0.2)
    assert "a local change" in other.read_text()  # never overwritten
    notes = get(records[0], "/api/status")["notes"]
    assert any(line in note for note in notes), notes


def test_a_pod_lost_while_the_others_wait_ends_them_with_the_reason(
        pods: list[Torchrun]) -> None:
    every_rank_waits(pods)
    time.sleep(5)  # every pod has beaten
    pods[0].stop()  # node rank 0: its agent served the job's store
    try:
        code = pods[1].proc.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the waiting pod never ended:\n{pods[1].output()}") from None
    assert code != 0
    assert "this pod's ranks end" in pods[1].output(), pods[1].output()
