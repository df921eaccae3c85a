"""A job over several pods on its pods' marks: the ``podcode.io/job`` annotation each pod's
session writes, and what the CLI reads back from it (a damaged one names no job)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.base.loop import LoopThread
from interactive.distributed.jobsession import JobSession, pod_ranks
from interactive.distributed.jobstore import Bug, JobStore, StoreAddress
from interactive.distributed.ranks import RankInfo
from interactive.kube.cluster import session_from_pod
from interactive.kube.labels import ANN_JOB, JobMark
from interactive.kube.pod import PodClient
from interactive.session.publish import Publisher
from tests.fake_kube import FakeKube

PORTS = {"code_server": 8080, "control": 8081, "debug": 5678}
MARK = JobMark("10.0.0.5:29500/restart-1", "train-worker-1", (2, 3), True)


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("test-job-marks")
    yield thread
    thread.stop()


def test_a_job_mark_reads_back_as_written() -> None:
    assert json.loads(MARK.encode()) == {"id": "10.0.0.5:29500/restart-1",
                                         "session_pod": "train-worker-1", "ranks": [2, 3],
                                         "serves_session": True}
    assert JobMark.decode(MARK.encode()) == MARK


@pytest.mark.parametrize("raw", [
    None, "", "not json", "[]", '"a job"',
    '{"session_pod": "p", "ranks": [0], "serves_session": true}',
    '{"id": "", "session_pod": "p", "ranks": [0], "serves_session": true}',
    '{"id": 7, "session_pod": "p", "ranks": [0], "serves_session": true}',
    '{"id": "j", "session_pod": null, "ranks": [0], "serves_session": true}',
    '{"id": "j", "session_pod": "p", "ranks": "0,1", "serves_session": true}',
    '{"id": "j", "session_pod": "p", "ranks": [0, "1"], "serves_session": true}',
    '{"id": "j", "session_pod": "p", "ranks": [true], "serves_session": true}',
    '{"id": "j", "session_pod": "p", "ranks": [-1], "serves_session": true}',
    '{"id": "j", "session_pod": "p", "ranks": [0], "serves_session": "yes"}',
])
def test_a_damaged_job_mark_names_no_job(raw: str | None) -> None:
    assert JobMark.decode(raw) is None


def test_a_pods_ranks_are_its_block_of_the_jobs_ranks() -> None:
    assert pod_ranks(RankInfo(rank=5, world_size=8, local_rank=1, local_world_size=4)) == (
        4, 5, 6, 7)
    assert pod_ranks(RankInfo(rank=0, world_size=4, local_rank=0, local_world_size=2)) == (0, 1)
    # numbered otherwise (a local rank past the rank, or past the pod's count): this rank
    assert pod_ranks(RankInfo(rank=1, world_size=4, local_rank=3, local_world_size=4)) == (1,)
    assert pod_ranks(RankInfo(rank=6, world_size=8, local_rank=2, local_world_size=2)) == (6,)


def _job(pod: str, serving: str, where: StoreAddress | None) -> JobSession:
    store = JobStore(None, "podcode/job/restart-1", pod, where)
    return JobSession(store, 0, Bug(2, "train-worker-1", "ValueError", "nan"), serving)


def test_the_job_session_names_the_job_by_its_store_and_restart() -> None:
    where = StoreAddress("10.0.0.5", 29500, 1)
    info = RankInfo(rank=3, world_size=4, local_rank=1, local_world_size=2)
    assert _job("train-worker-1", "train-worker-1", where).mark(info) == MARK
    other = _job("train-worker-0", "train-worker-1", where).mark(
        RankInfo(rank=0, world_size=4, local_rank=0, local_world_size=2))
    assert other == JobMark(MARK.id, "train-worker-1", (0, 1), False)
    assert _job("train-worker-1", "train-worker-1", None).mark(info) is None


def test_the_pod_of_a_jobs_session_carries_the_job(
    fake_kube: FakeKube, loop: LoopThread, tmp_path: Path
) -> None:
    """Marked through the publisher and the pod's client, read back as the CLI lists it."""
    for name in ("train-worker-1", "alone-0"):
        fake_kube.add_pod(name, "ml")
    pods = [PodClient.discover({"POD_NAME": name, "POD_NAMESPACE": "ml",
                                "KUBECONFIG": str(fake_kube.kubeconfig)})
            for name in ("train-worker-1", "alone-0")]
    for pod, job in zip(pods, (MARK, None), strict=True):
        assert pod is not None
        publisher = Publisher(loop, home=tmp_path, base_home=tmp_path, leader=True)
        loop.call(publisher.mark_pod(pod, task="m.fit", owner=None, ports=PORTS, job=job))
        publisher.close()
        pod.close()
    marked, alone = (fake_kube.pod(name, "ml") for name in ("train-worker-1", "alone-0"))
    assert marked is not None and alone is not None
    assert json.loads(marked["metadata"]["annotations"][ANN_JOB])["ranks"] == [2, 3]
    assert session_from_pod(marked).job == MARK
    assert ANN_JOB not in alone["metadata"]["annotations"]
    assert session_from_pod(alone).job is None
