"""Every rank names the rank whose bug broke the group, never a victim.

The record is checked on a real ``HashStore``: the first failure stays, reading never
waits, and a victim's message names what is known. The same over two pods, end to end
(two torchrun agents, each rank naming global rank 2 and its pod), is in
``tests/test_multipod_session.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from interactive.distributed import blame
from interactive.distributed.peers import Peers
from interactive.distributed.ranks import RankInfo

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
