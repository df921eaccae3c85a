"""The machine's processes, cheaply: parent, owner, CPU time and start of each.

The CPU sampler needs, at every poll, the session's process tree and the CPU time of each
process in it. One pass over ``/proc/<pid>/stat`` gives all of it (one read per process,
about 10 µs); psutil would read each process several times (its parent, its start, its
times), and the kernel's per-thread ``children`` lists cost one read per *thread* of each
process in the tree (code-server's Node.js processes have a dozen threads each).

:class:`TreeReader` does better: the kernel's last allocated pid (``/proc/loadavg``)
unchanged means no process (nor thread) was created since the last reading, so the tree can
only have lost processes, and reading its own members again is enough; while processes do
start, the whole table is read again at most once a minute.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import psutil

RESCAN_SECONDS = 60.0
"""While processes start elsewhere, the whole table is read at most this often."""


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    uid: int
    cpu_seconds: float
    """User plus system time so far."""
    started: float
    """When it started, in seconds since the epoch (as psutil's ``create_time``)."""


def read_table(proc_root: str = "/proc", pids: Iterable[int] | None = None) -> dict[int, Proc]:
    """Every process that could be read (one that ends meanwhile is left out), or only
    ``pids``."""
    if pids is None:
        try:
            pids = [int(name) for name in os.listdir(proc_root) if name.isdigit()]
        except OSError:
            return {}
    ticks, boot = _clock()
    table: dict[int, Proc] = {}
    for pid in pids:
        proc = _read_one(proc_root, pid, ticks, boot)
        if proc is not None:
            table[pid] = proc
    return table


@functools.cache
def _clock() -> tuple[int, float]:
    """Clock ticks a second and when the machine booted (the stat file's units): fixed
    while the process runs, so read once rather than once per reading."""
    return os.sysconf("SC_CLK_TCK"), psutil.boot_time()


def _read_one(proc_root: str, pid: int, ticks: int, boot: float) -> Proc | None:
    path = os.path.join(proc_root, str(pid))
    try:
        with open(os.path.join(path, "stat"), "rb") as stat:
            raw = stat.read()
        uid = os.stat(path).st_uid
        fields = raw[raw.rindex(b")") + 2:].split()
        return Proc(
            pid=pid, ppid=int(fields[1]), uid=uid,
            cpu_seconds=(int(fields[11]) + int(fields[12])) / ticks,
            started=boot + int(fields[19]) / ticks,
        )
    except (OSError, ValueError, IndexError):
        return None


def last_pid(proc_root: str = "/proc") -> int | None:
    """The pid the kernel allocated last in this pid namespace (None: unknown)."""
    try:
        with open(os.path.join(proc_root, "loadavg"), "rb") as loadavg:
            return int(loadavg.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


class TreeReader:
    """The processes below some roots (the roots included), read again at each call.

    The whole table is read the first time, when the roots change, when a member's parent
    is no longer the one it had (it was reparented: its parent ended), and when a process
    was created anywhere since the last whole reading, at most every ``rescan_seconds``
    (a busy neighbour starting processes all the time would otherwise make every reading
    whole). Otherwise only the members are read again. A process that joined the tree
    meanwhile is found late, not lost: :attr:`previous_whole_at` says since when the tree
    was not looked at whole, and its CPU time counts from its start.
    """

    def __init__(self, proc_root: str = "/proc", rescan_seconds: float = RESCAN_SECONDS,
                 wall: Callable[[], float] = time.time) -> None:
        self.proc_root = proc_root
        self.rescan_seconds = rescan_seconds
        self.wall = wall
        self._last_pid: int | None = None
        self._roots: tuple[int, ...] = ()
        self._members: dict[int, Proc] = {}
        self._whole_now: float | None = None
        self.whole_at = 0.0
        """When the table was last read whole (wall-clock seconds)."""
        self.previous_whole_at = 0.0
        """When it was read whole the time before."""
        self.full_reads = 0
        """How many times the whole table was read."""

    def read(self, roots: Iterable[int], now: float) -> dict[int, Proc]:
        """The tree now; ``now`` is the caller's clock (it paces the whole readings)."""
        roots = tuple(roots)
        newest = last_pid(self.proc_root)
        if self._whole_now is not None and roots == self._roots and not (
            (newest is None or newest != self._last_pid)
            and now - self._whole_now >= self.rescan_seconds
        ):
            again = read_table(self.proc_root, self._members)
            if all(again.get(pid, proc).ppid == proc.ppid for pid, proc in self._members.items()):
                self._members = again
                return dict(again)
        table = read_table(self.proc_root)
        self.full_reads += 1
        present = [pid for pid in roots if pid in table]
        below = descendants(present, children_map(table))
        self._members = {pid: table[pid] for pid in [*present, *below]}
        self._last_pid, self._roots, self._whole_now = newest, roots, now
        self.previous_whole_at, self.whole_at = self.whole_at, self.wall()
        return dict(self._members)


def children_map(table: Mapping[int, Proc]) -> dict[int, list[int]]:
    """``ppid -> the pids of its children``."""
    children: dict[int, list[int]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    return children


def descendants(roots: Iterable[int], children: Mapping[int, list[int]]) -> list[int]:
    """The pids below ``roots`` (not the roots themselves), each once."""
    found: dict[int, None] = {}
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found[child] = None
                stack.append(child)
    return list(found)
