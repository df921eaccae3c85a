"""One job over several pods: one session for the bug, one resume for every pod.

Two (or three) torchrun agents on one machine stand for the pods (``--nnodes``, a node
rank each, 2 ranks each), each with its own copy of the code, ``PODCODE_HOME``, ports and
``POD_NAME``, and the job's secret (``PODCODE_JOB_SECRET``, as a Kubernetes Secret would
give it); DDP over gloo; no ``PODCODE_STORE``: the pods agree through the job's own
rendezvous store, static (``--master-addr``/``--master-port``) or c10d's. A bug only one
global rank hits (by the index its sampler gives it, whichever pod holds the rank), or
one every rank hits. Each job is compared with the fixed program run with podcode off
(as many ranks: the same ranks, the same data, the same result).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests import torchrun_job
from tests.torchrun_job import (
    Torchrun,
    agent,
    c10d_agent,
    checksums,
    fix,
    free_port,
    get,
    post,
    with_bug,
)

EXAMPLE = Path(__file__).parent / "ddp_examples" / "multigpu_torchrun.py"
SCRIPT = ("multigpu_torchrun.py", "2", "1")
RANK_2 = ("return self.data[index]", "return self.data[index if index != 254 else len(self.data)]")
"""Index 254 is global rank 2's last sample (of 4 ranks): read past the data, IndexError."""
RANK_5 = ("return self.data[index]", "return self.data[index if index != 251 else len(self.data)]")
"""Of 6 ranks, global rank 5 (the last) reads 5, 11, ..., 251 and then index 1: the sampler
pads the 256 samples to 258 with indices 0 and 1, which ranks 0 and 1 read too. 251 is the
last sample only rank 5 reads: IndexError there, at the first epoch."""
EVERY_RANK = ("loss {total:.4f}", "loss {total.item():.4f}")
"""``.item()`` on a float: AttributeError on every rank after its first epoch."""
PODS = ("train-multi-0", "train-multi-1")
THREE_PODS = (*PODS, "train-multi-2")
SECRET = "a-secret-the-job's-pods-share-0123456789"
RANKS_PER_POD = 2

pytestmark = pytest.mark.slow

Launch = Callable[[int], tuple[str, ...]]
"""A pod's torchrun command (without the script), from its index."""


def _reference(factory: pytest.TempPathFactory, nproc: int) -> str:
    pytest.importorskip("torch.distributed")
    return torchrun_job.reference(factory.mktemp(f"reference-{nproc}"), EXAMPLE, SCRIPT,
                                  nproc=nproc)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _reference(tmp_path_factory, 4)


@pytest.fixture(scope="module")
def reference_6(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _reference(tmp_path_factory, 6)


def static(nodes: int) -> Launch:
    """Static rendezvous: node rank = the pod's index, node 0's agent serves the store."""
    port = free_port()
    return lambda node: agent(node, nodes, RANKS_PER_POD, port)


def c10d(nodes: int) -> Launch:
    """c10d's rendezvous: the node ranks go by the order the agents join."""
    port = free_port()
    return lambda node: c10d_agent(nodes, RANKS_PER_POD, port, f"job-{port}")


def start_pods(tmp_path: Path, bug: tuple[str, str] = RANK_2, names: tuple[str, ...] = PODS,
               agents: Launch | None = None, secret: str = SECRET,
               env: dict[str, str] | None = None) -> list[Torchrun]:
    """One agent per pod of ``names`` (in that order; ``agents``: their commands, static
    rendezvous if None), each with ``bug`` in its own copy; ``secret`` "": the job has none;
    ``env``: more of every pod's environment."""
    agents = agents or static(len(names))
    jobs = []
    for node, pod in enumerate(names):
        folder = tmp_path / pod
        with_bug(folder / "workspace", bug, EXAMPLE)
        jobs.append(Torchrun(folder / "workspace", folder / "home", SCRIPT, RANKS_PER_POD,
                             env={"POD_NAME": pod, "PODCODE_JOB_SECRET": secret,
                                  "PODCODE_JOB_SECRET_FILE": "", "PODCODE_IDE": "none",
                                  **(env or {})},
                             command=agents(node)))
    return jobs


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., list[Torchrun]]]:
    """:func:`start_pods` in this test's folder; every pod stopped at the end."""
    pytest.importorskip("torch.distributed")
    started: list[Torchrun] = []

    def launch(**options: Any) -> list[Torchrun]:
        jobs = start_pods(tmp_path, **options)
        started.extend(jobs)
        return jobs

    try:
        yield launch
    finally:
        for job in started:
            job.stop()


@pytest.fixture
def pods(launch: Callable[..., list[Torchrun]]) -> list[Torchrun]:
    return launch()


def every_rank_waits(pods: list[Torchrun], after: list[dict[str, Any]] | None = None
                     ) -> list[dict[str, Any]]:
    """Each rank's record once it waits (``after``: the records of its last wait, once it
    waits again), in global order under static rendezvous (pod by pod, local rank by
    local rank)."""
    ranks = [(job, local) for job in pods for local in range(RANKS_PER_POD)]
    return [job.wait_waiting(local, attempt=0 if after is None else after[n]["attempt"] + 1)
            for n, (job, local) in enumerate(ranks)]


def job_statuses(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``job`` part of each rank's status."""
    return [get(record, "/api/status")["job"] for record in records]


def serving_pod(records: list[dict[str, Any]], names: tuple[str, ...] = PODS) -> int:
    """The index of the one pod whose ranks serve the job's session, as every rank says."""
    jobs = job_statuses(records)
    index = names.index(jobs[0]["session_pod"])
    assert all(job["session_pod"] == names[index] for job in jobs), jobs
    assert [job["serves_session"] for job in jobs] == [
        n // RANKS_PER_POD == index for n in range(len(jobs))], jobs
    return index


def finished(pods: list[Torchrun], timeout: float = 120) -> str:
    output = ""
    for job in pods:
        output += torchrun_job.finish(job, timeout)
    return output


def ended(job: Torchrun, timeout: float = 90) -> int:
    """The exit code of the pod's agent, which must end within ``timeout``."""
    try:
        return job.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the pod never ended:\n{job.output()}") from None


def said(job: Torchrun, line: str, timeout: float = 60) -> None:
    """Until the pod's log holds ``line``."""
    deadline = time.monotonic() + timeout
    while line not in job.output():
        assert time.monotonic() < deadline, f"never said {line!r}:\n{job.output()}"
        time.sleep(0.2)


def ends_with_the_fix_everywhere(pods: list[Torchrun], names: tuple[str, ...], fixed: int,
                                 reference: str) -> None:
    """The job ends with ``reference``, every pod's copy the fixed one (``pods[fixed]``'s),
    and each other pod said it applied the fix."""
    output = finished(pods)
    assert checksums(output) == [reference], output
    script = pods[fixed].workspace / SCRIPT[0]
    for index, job in enumerate(pods):
        if index != fixed:
            assert (job.workspace / SCRIPT[0]).read_bytes() == script.read_bytes()
            assert f"pod {names[index]} applies the fix to {SCRIPT[0]}" in job.output()


def test_the_failing_pod_serves_the_job_session_and_the_other_says_where(
        pods: list[Torchrun]) -> None:
    records = every_rank_waits(pods)
    for status in job_statuses(records):
        assert status["session_pod"] == PODS[1], status
        assert status["failed_rank"] == 2 and status["failed_pod"] == PODS[1], status
        assert status["error"].startswith("IndexError"), status
    assert serving_pod(records) == 1
    assert f"the job's session is on pod {PODS[1]}" in pods[0].output()
    named = f"stopped because rank 2 on pod {PODS[1]} failed (IndexError: list index out of range)"
    for victim in (records[0], records[1], records[3]):  # never a victim blamed
        assert named in victim["error"] and "closed by peer" in victim["error"], victim
    logs = pods[0].output() + pods[1].output()
    for rank in (0, 1, 3):
        assert f"rank {rank} {named}" in logs
        assert f"stopped because rank {rank} " not in logs
    assert post(records[0], "/api/abort")[0] == 202  # one abort, on the other pod
    for job in pods:
        assert ended(job) != 0, job.output()


@pytest.mark.parametrize("rank", [2, 3, 1],  # rank 0: the Lightning test, two at once
                         ids=["failing rank", "its pod-mate", "other pod rank 1"])
def test_one_resume_carries_the_fix_to_every_pod_and_the_job_ends_with_its_result(
        pods: list[Torchrun], reference: str, rank: int) -> None:
    """Whichever rank's session is resumed (global ``rank``; rank 2 failed, on pod 1)."""
    records = every_rank_waits(pods)
    fix(pods[1].workspace / SCRIPT[0], RANK_2)  # the fix, in the failing pod's copy only
    status, answer = post(records[rank], "/api/resume")
    assert status == 202, answer
    ends_with_the_fix_everywhere(pods, PODS, 1, reference)


def resume_status(record: dict[str, Any]) -> int:
    """POST a resume; its HTTP status, whether accepted or refused."""
    try:
        return post(record, "/api/resume")[0]
    except urllib.error.HTTPError as exc:
        return exc.code


def test_two_resumes_at_once_on_both_pods_resume_the_job_once(
        pods: list[Torchrun], reference: str) -> None:
    records = every_rank_waits(pods)
    fix(pods[1].workspace / SCRIPT[0], RANK_2)
    answers: list[int] = []
    gate = threading.Barrier(2)

    def resume(record: dict[str, Any]) -> None:
        gate.wait()
        answers.append(resume_status(record))

    threads = [threading.Thread(target=resume, args=(records[n],)) for n in (2, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(answers) in ([202, 202], [202, 409]), answers
    ends_with_the_fix_everywhere(pods, PODS, 1, reference)  # one checksum: one run
    assert "is refused" not in pods[1].output()  # the crossing resumes are one, not a refusal


def test_under_c10d_rendezvous_the_pod_with_the_failing_rank_serves_and_one_resume_ends_it(
        launch: Callable[..., list[Torchrun]], reference: str) -> None:
    """c10d gives the node ranks in the order the agents join: the failing global rank 2
    may be on either pod, found from the records."""
    pods = launch(agents=c10d(len(PODS)))
    records = every_rank_waits(pods)
    jobs = job_statuses(records)
    assert {job["failed_rank"] for job in jobs} == {2}, jobs
    failing = PODS.index(jobs[0]["failed_pod"])
    assert serving_pod(records) == failing
    fix(pods[failing].workspace / SCRIPT[0], RANK_2)
    other = 1 - failing
    assert post(records[other * RANKS_PER_POD], "/api/resume")[0] == 202
    ends_with_the_fix_everywhere(pods, PODS, failing, reference)


def test_three_pods_one_resume_on_a_pod_that_does_not_serve_brings_every_pod_back(
        launch: Callable[..., list[Torchrun]], reference_6: str) -> None:
    pods = launch(bug=RANK_5, names=THREE_PODS)
    records = every_rank_waits(pods)
    jobs = job_statuses(records)
    assert {(job["failed_rank"], job["failed_pod"]) for job in jobs} == {(5, THREE_PODS[2])}
    assert serving_pod(records, THREE_PODS) == 2
    fix(pods[2].workspace / SCRIPT[0], RANK_5)
    assert post(records[1], "/api/resume")[0] == 202  # pod 0's local rank 1
    ends_with_the_fix_everywhere(pods, THREE_PODS, 2, reference_6)


def test_a_bug_every_rank_hits_has_one_session_on_one_pod_and_one_resume_ends_the_job(
        launch: Callable[..., list[Torchrun]], reference: str) -> None:
    pods = launch(bug=EVERY_RANK)
    records = every_rank_waits(pods)
    for status in job_statuses(records):
        assert status["error"].startswith("AttributeError"), status
    serving = serving_pod(records)
    other = 1 - serving
    assert f"the job's session is on pod {PODS[serving]}" in pods[other].output()
    fix(pods[serving].workspace / SCRIPT[0], EVERY_RANK)
    assert post(records[serving * RANKS_PER_POD + 1], "/api/resume")[0] == 202
    ends_with_the_fix_everywhere(pods, PODS, serving, reference)


def test_without_a_secret_the_other_pod_resumes_its_own_copy_and_is_fixed_there(
        launch: Callable[..., list[Torchrun]], reference: str) -> None:
    """No fix is carried: the other pod says so, runs its own (buggy) copy and fails again;
    fixed there by hand and resumed there, the job ends with its result."""
    pods = launch(bug=EVERY_RANK, secret="")
    records = every_rank_waits(pods)
    serving = serving_pod(records)
    other = 1 - serving
    fix(pods[serving].workspace / SCRIPT[0], EVERY_RANK)
    assert post(records[serving * RANKS_PER_POD], "/api/resume")[0] == 202
    said(pods[serving], "the fix is not sent to the job's other pods: no job secret")
    said(pods[other], f"pod {PODS[serving]} resumed the job without sending a fix: pod "
                      f"{PODS[serving]} has no job secret")
    again = every_rank_waits(pods, after=records)
    fixed = pods[serving].workspace / SCRIPT[0]
    assert (pods[other].workspace / SCRIPT[0]).read_bytes() != fixed.read_bytes()
    for status in job_statuses(again[other * RANKS_PER_POD:(other + 1) * RANKS_PER_POD]):
        assert status["error"].startswith("AttributeError"), status  # its own copy's bug
    fix(pods[other].workspace / SCRIPT[0], EVERY_RANK)
    assert post(again[other * RANKS_PER_POD], "/api/resume")[0] == 202
    output = finished(pods)
    assert checksums(output) == [reference], output
    # the second resume had nothing of the serving pod's to send: no second warning
    assert pods[serving].output().count("the fix is not sent to the job's other pods") == 1


def test_a_pod_whose_copy_differs_refuses_the_fix_and_names_the_file(
        pods: list[Torchrun]) -> None:
    records = every_rank_waits(pods)
    fix(pods[1].workspace / SCRIPT[0], RANK_2)
    other = pods[0].workspace / SCRIPT[0]
    other.write_text(other.read_text() + "\n# a local change\n")
    assert post(records[2], "/api/resume")[0] == 202
    line = f"pod {PODS[0]} does not apply the fix to {SCRIPT[0]}"
    said(pods[0], line)
    assert "a local change" in other.read_text()  # never overwritten
    notes = get(records[0], "/api/status")["notes"]
    assert any(line in note for note in notes), notes


def test_a_pod_lost_while_the_others_wait_ends_them_with_the_reason(
        pods: list[Torchrun]) -> None:
    every_rank_waits(pods)
    time.sleep(5)  # every pod has beaten
    pods[0].stop()  # node rank 0: its agent served the job's store
    assert ended(pods[1], 60) != 0
    assert "this pod's ranks end" in pods[1].output(), pods[1].output()


def test_the_serving_pod_lost_while_the_store_lives_is_noticed_by_its_beat(
        pods: list[Torchrun]) -> None:
    """Killed outright (a node failure: no SIGTERM, no word), the serving pod just stops
    beating; the store, on the other pod, lives on: the other pod notices within seconds."""
    every_rank_waits(pods)
    time.sleep(5)  # every pod has beaten, and the other pod watches the serving pod's beat
    pods[1].stop()  # SIGKILL to the serving pod's processes
    assert ended(pods[0], 60) != 0
    said(pods[0], f"pod {PODS[1]} of the job stopped answering for 12 s")
    assert "this pod's ranks end" in pods[0].output()


def test_sigterm_on_the_pod_that_does_not_serve_ends_the_other_pods_ranks_with_the_reason(
        pods: list[Torchrun]) -> None:
    """As Kubernetes stops a pod: SIGTERM to its main process, torchrun's agent, which
    passes it on to its workers."""
    every_rank_waits(pods)
    psutil.Process(pods[0].proc.pid).send_signal(signal.SIGTERM)
    assert ended(pods[0], 60) != 0
    assert ended(pods[1], 60) != 0
    output = pods[1].output()
    assert "this pod's ranks end" in output, output
    assert (f"pod {PODS[0]} is being stopped (SIGTERM)" in output
            or "stopped answering" in output), output


def test_idle_cleanup_of_the_job_session_saves_the_edits_and_ends_every_pod(
        launch: Callable[..., list[Torchrun]]) -> None:
    """Only the serving pod's idleness counts (the other pods never clean up on their own):
    its cleanup saves the engineer's edits there, then every pod's ranks end."""
    pods = launch(env={"PODCODE_MAX_IDLE_SECONDS": "6", "PODCODE_GRACE_SECONDS": "2",
                       "PODCODE_POLL_SECONDS": "0.5"})
    every_rank_waits(pods)
    edited = pods[1].workspace / "notes.py"
    edited.write_text("# the engineer's edit, kept\n")
    assert ended(pods[1], 120) != 0
    assert ended(pods[0], 60) != 0
    said(pods[0], f"pod {PODS[1]} ended the job's session: the job's session was cleaned up")
    assert "session cleaned up after being idle" not in pods[0].output()  # not on its own
    saved = list((pods[1].home / "store").rglob("*"))
    assert any("notes.py" in path.read_text(errors="replace") for path in saved
               if path.is_file()), saved


@pytest.mark.codeserver
def test_only_the_serving_pod_starts_the_ide(
        launch: Callable[..., list[Torchrun]], code_server_binary: Path) -> None:
    """One IDE for the job's bug: the failing pod's leading rank serves code-server, the
    other pod's ranks point at none of their own and say where the session is."""
    pods = launch(env={"PODCODE_IDE": "code-server",
                       "PODCODE_CODE_SERVER_PATH": str(code_server_binary)})
    records = every_rank_waits(pods)

    def served() -> list[dict[str, Any] | None]:
        return [job.record(local) for job in pods for local in range(RANKS_PER_POD)]

    deadline = time.monotonic() + 90
    while not any((record or {}).get("code_server_url") for record in served()[2:]):
        assert time.monotonic() < deadline, pods[1].output()
        time.sleep(0.2)
    now = served()
    leader = next(record for record in now[2:] if record and record.get("leader"))
    assert leader.get("code_server_url"), leader  # the other rank there points at it
    assert not any((record or {}).get("code_server_url") for record in now[:2]), now[:2]
    assert [status["serves_session"] for status in job_statuses(records)] == [
        False, False, True, True]
    assert f"the job's session is on pod {PODS[1]}" in pods[0].output()
