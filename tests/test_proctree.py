"""The process table read from /proc agrees with psutil on the real processes of this test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from interactive.reaper.proctree import TreeReader, children_map, descendants, read_table

GRANDCHILD = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(child.pid, flush=True)\n"
    "sum(range(10**7))\n"  # some CPU time to read
    "time.sleep(60)\n"
)


@pytest.fixture
def family() -> Iterator[tuple[int, int]]:
    """A child of this process that started a grandchild: (child, grandchild)."""
    child = subprocess.Popen([sys.executable, "-c", GRANDCHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    yield child.pid, grandchild
    os.kill(grandchild, 9)
    child.kill()
    child.wait(10)
    child.stdout.close()


def test_the_tree_below_this_process_holds_child_and_grandchild(
    family: tuple[int, int],
) -> None:
    table = read_table()
    found = descendants([os.getpid()], children_map(table))
    assert set(family) <= set(found)
    assert os.getpid() not in found
    child, grandchild = family
    assert table[grandchild].ppid == child
    assert table[child].ppid == os.getpid()


def test_each_entry_matches_what_psutil_reads(family: tuple[int, int]) -> None:
    child = psutil.Process(family[0])
    child.cpu_times()  # let it run its loop a while
    table = read_table()
    entry = table[child.pid]
    times = child.cpu_times()
    assert entry.uid == child.uids().effective
    assert entry.started == pytest.approx(child.create_time(), abs=0.02)
    assert entry.cpu_seconds == pytest.approx(times.user + times.system, abs=0.05)


def test_a_missing_or_damaged_proc_gives_what_it_can(tmp_path: Path) -> None:
    assert read_table(str(tmp_path / "absent")) == {}
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_bytes(b"7 (odd) name) S 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 "
                                          b"1 0 500 0 0")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "stat").write_bytes(b"8 (cut short) S")
    (tmp_path / "self").mkdir()
    table = read_table(str(tmp_path))
    assert list(table) == [7]
    ticks = os.sysconf("SC_CLK_TCK")
    assert table[7].ppid == 1
    assert table[7].cpu_seconds == pytest.approx(7 / ticks)
    assert table[7].started == pytest.approx(psutil.boot_time() + 500 / ticks)


def test_descendants_are_listed_once_even_in_a_loop() -> None:
    assert sorted(descendants([1], {1: [2, 3], 2: [4], 4: [2]})) == [2, 3, 4]


class FakeProc:
    """A /proc of our own making: stat files and loadavg's last pid."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def start(self, pid: int, ppid: int) -> None:
        """A new process: the kernel's last allocated pid is its."""
        (self.root / str(pid)).mkdir()
        self.change(pid, ppid)
        (self.root / "loadavg").write_text(f"0.0 0.0 0.0 1/10 {pid}\n")

    def change(self, pid: int, ppid: int, ticks: int = 0) -> None:
        """What a process's stat says now (no pid allocated)."""
        fields = ["S", str(ppid), *["0"] * 9, str(ticks), "0", *["0"] * 6, "100"]
        (self.root / str(pid) / "stat").write_text(f"{pid} (p{pid}) " + " ".join(fields))

    def end(self, pid: int) -> None:
        (self.root / str(pid) / "stat").unlink()
        (self.root / str(pid)).rmdir()


def test_the_tree_is_read_whole_only_when_a_process_started_or_moved(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    for pid, ppid in [(1, 0), (10, 1), (11, 10), (12, 11), (20, 1)]:
        proc.start(pid, ppid)
    reader = TreeReader(str(tmp_path))
    assert sorted(reader.read([10], 0)) == [10, 11, 12]
    assert reader.full_reads == 1

    proc.change(11, 10, ticks=500)  # it ran: its members are read again, nothing else
    tree = reader.read([10], 10)
    assert reader.full_reads == 1
    assert tree[11].cpu_seconds == pytest.approx(500 / os.sysconf("SC_CLK_TCK"))

    proc.start(13, 12)  # a new process: the whole table again, once a minute at most
    assert sorted(reader.read([10], 20)) == [10, 11, 12]
    assert reader.full_reads == 1
    assert sorted(reader.read([10], 60)) == [10, 11, 12, 13]
    assert reader.full_reads == 2

    proc.end(13)  # one ended: no new pid, read the members only
    assert sorted(reader.read([10], 200)) == [10, 11, 12]
    assert reader.full_reads == 2

    proc.end(11)
    proc.change(12, 1)  # its parent ended: reparented, no new pid
    assert sorted(reader.read([10], 210)) == [10]
    assert reader.full_reads == 3

    assert sorted(reader.read([20], 220)) == [20]  # other roots: read whole
    assert reader.full_reads == 4


def test_without_loadavg_the_table_is_read_whole_once_a_minute(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.start(10, 1)
    (tmp_path / "loadavg").unlink()
    reader = TreeReader(str(tmp_path))
    reader.read([10], 0)
    reader.read([10], 10)
    reader.read([10], 60)
    assert reader.full_reads == 2
