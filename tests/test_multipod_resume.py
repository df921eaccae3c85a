"""Ranks resumed one after another (or one pod after another) start their next attempt together.

``collective.leave_together`` on a real ``HashStore`` shared by threads that stand for
the ranks: none goes on before the last has arrived, whatever the order; a rank whose
peers never come goes on once its wait runs out, and says it could not wait. The
end-to-end cases (Lightning and DDP, the resume reaching rank 1 first) are in
``tests/test_lightning_e2e.py`` and ``tests/test_ddp_e2e.py``.
"""

from __future__ import annotations

import datetime
import threading

import pytest

from interactive.distributed import collective

dist = pytest.importorskip("torch.distributed")


def test_no_rank_goes_on_before_every_rank_has_resumed() -> None:
    store = dist.HashStore()
    passed: list[int] = []

    def rank(number: int) -> None:
        assert collective.leave_together(store, 0, number, 3)
        passed.append(number)

    early = [threading.Thread(target=rank, args=(n,), daemon=True) for n in (2, 0)]
    for thread in early:
        thread.start()
    for thread in early:
        thread.join(0.5)
    assert passed == []  # ranks 2 and 0 wait for rank 1, however long it takes
    rank(1)
    for thread in early:
        thread.join(30)
    assert sorted(passed) == [0, 1, 2]


def test_each_resume_waits_on_its_own_generation() -> None:
    store = dist.HashStore()
    for generation in (0, 1):
        other = threading.Thread(target=collective.leave_together,
                                 args=(store, generation, 1, 2), daemon=True)
        other.start()
        assert collective.leave_together(store, generation, 0, 2)
        other.join(30)
        assert not other.is_alive()


def test_a_rank_whose_peers_never_resume_goes_on_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = dist.HashStore()
    wait = datetime.timedelta(milliseconds=200)
    assert not collective.leave_together(store, 0, 0, 2, timeout=wait)
    assert "could not wait for every rank to resume" in caplog.text
