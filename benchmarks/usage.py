"""What a process tree uses, for the idle figures: its processes, CPU seconds, memory.

Each reading skips a process that vanished meanwhile (a short-lived helper)."""

from __future__ import annotations

import psutil


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every process below it."""
    process = psutil.Process(pid)
    return [process, *process.children(recursive=True)]


def cpu_seconds(processes: list[psutil.Process], *, children: bool = False) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each process, by pid; with ``children``,
    those of its finished children too."""
    used: dict[int, float] = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used[process.pid] = times.user + times.system + (
            times.children_user + times.children_system if children else 0.0)
    return used


def rss_bytes(processes: list[psutil.Process]) -> int:
    """Resident memory of ``processes``, together."""
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total
