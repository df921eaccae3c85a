"""One job over two pods: every rank names the rank whose bug broke the group, never a victim.

Two torchrun agents on one machine stand for two pods (``--nnodes 2``, a node rank each,
2 ranks each), each with its own copy of the code, ``PODCODE_HOME``, ports and
``POD_NAME``; DDP over gloo. A bug only global rank 2 (the second pod's local rank 0)
hits, while the others wait in DDP's gradient all-reduce. The failing rank records its
failure in the job's store before it breaks the group, so the ranks of the first pod,
which only see gloo's "Connection closed by peer", name it too.

The record itself is checked on a real ``HashStore``: the first failure stays, reading
never waits, and a victim's message names what is known.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.distributed import blame
from interactive.distributed.peers import Peers
from interactive.distributed.ranks import RankInfo
from tests.torchrun_job import Torchrun, agent, free_port, post, with_bug

EXAMPLE = Path(__file__).parent / "ddp_examples" / "multigpu_torchrun.py"
SCRIPT = ("multigpu_torchrun.py", "2", "1")
RANK_2 = ("return self.data[index]", "return self.data[index if index != 254 else len(self.data)]")
"""Index 254 is global rank 2's last sample (of 4 ranks): read past the data, IndexError."""
PODS = ("train-multi-0", "train-multi-1")
NAMED = f"stopped because rank 2 on pod {PODS[1]} failed (IndexError: list index out of range)"


def test_the_first_failure_recorded_stays_and_is_read_without_waiting() -> None:
    dist = pytest.importorskip("torch.distributed")
    store = dist.HashStore()
    assert blame.first(store, 0) is None  # nothing recorded: no wait for the store's timeout
    first = blame.Failure(2, "IndexError: list index out of range", "pod-b")
    assert blame.record_first(store, 0, first) == first
    later = blame.Failure(0, "ValueError: x", "pod-a")
    assert blame.record_first(store, 0, later) == first
    assert blame.first(store, 0) == first
    assert blame.first(store, 1) is None  # the next generation starts clean


def test_a_victim_names_the_culprit_or_says_who_broke_the_group() -> None:
    culprit = blame.Failure(2, "IndexError: list index out of range", "pod-b")
    assert blame.reason(culprit, other_pods=True) == (
        "stopped because rank 2 on pod pod-b failed (IndexError: list index out of range)")
    assert blame.reason(blame.Failure(1, "ValueError: x"), other_pods=False) == (
        "stopped because rank 1 failed (ValueError: x)")
    assert "a rank on another pod broke" in blame.reason(None, other_pods=True)
    assert "another pod" not in blame.reason(None, other_pods=False)


def test_a_rank_stopped_by_the_group_breaking_is_never_a_culprit(tmp_path: Path) -> None:
    """Its announcement says so even when it cannot name the cause (a rank on another pod)."""
    victim = Peers(tmp_path, RankInfo(1, 4, 1, 2))
    other = Peers(tmp_path, RankInfo(0, 4, 0, 2))
    victim.announce_failure("RuntimeError: Connection closed by peer", because=None, broken=True)
    assert other.culprit() is None
    other.announce_failure("IndexError: list index out of range", because=None)
    assert victim.culprit() == (0, "IndexError: list index out of range")


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[list[Torchrun]]:
    pytest.importorskip("torch.distributed")
    port = free_port()
    jobs: list[Torchrun] = []
    try:
        for node, pod in enumerate(PODS):
            folder = tmp_path / pod
            with_bug(folder / "workspace", RANK_2, EXAMPLE)
            jobs.append(Torchrun(folder / "workspace", folder / "home", SCRIPT,
                                 env={"POD_NAME": pod}, command=(*agent(node, 2, 2, port),)))
        yield jobs
    finally:
        for job in jobs:
            job.stop()


@pytest.mark.slow
def test_every_rank_of_both_pods_names_rank_2_and_not_a_victim(pods: list[Torchrun]) -> None:
    first, second = pods
    failed = second.wait_waiting(0)  # global rank 2
    assert failed["rank"]["rank"] == 2
    assert failed["error"].startswith("IndexError: list index out of range"), failed["error"]
    victims = [first.wait_waiting(0), first.wait_waiting(1), second.wait_waiting(1)]
    for victim in victims:
        assert victim["rank"]["rank"] != 2
        assert NAMED in victim["error"], victim["error"]
        assert "closed by peer" in victim["error"]  # what the collective said, kept after it
    logs = first.output() + second.output()
    for rank in (0, 1, 3):  # each says it in its log too, and no one blames a victim
        assert f"rank {rank} {NAMED}" in logs
        assert f"stopped because rank {rank} " not in logs
    for job in pods:
        assert post(job.wait_waiting(0), "/api/abort")[0] == 202  # forwarded to local rank 1
    for job in pods:
        try:
            job.proc.wait(90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the aborted job never ended:\n{job.output()}") from None
