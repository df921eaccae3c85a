"""What every figure records: several runs, their median and range, and the machine.

A benchmark times its own code and its baseline in the same process, interleaved
(A B B A ...) so that both see the same machine weather, and turns the samples into
an entry with :func:`figure` (a quantity) or :func:`ratio` (one ratio per pair of
runs). Entries keep the original shape ``{"name", "value", "unit", "baseline",
"goal"}``; ``value`` is the median, and ``min``, ``max`` and ``runs`` say how far
the runs spread. ``goal`` is a string that starts with ``<=`` or ``>=`` where it can
be checked; :func:`goal_met` checks it.

``PODCODE_BENCH_RUNS`` changes the number of runs of every figure (default 5).
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RUNS = int(os.environ.get("PODCODE_BENCH_RUNS", "5"))
_GOAL = re.compile(r"^\s*(<=|>=|<|>|==)\s*(-?[0-9.]+(?:e-?[0-9]+)?)")


def seconds(call: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def interleaved(
    ours: Callable[[], float], baseline: Callable[[], float], runs: int = RUNS
) -> tuple[list[float], list[float]]:
    """``runs`` samples of each, in the order A B B A A B ...: neither always goes first.

    Each callable returns its own sample (seconds, bytes, ...), so it can leave its
    set-up and clean-up out of the timing."""
    mine: list[float] = []
    theirs: list[float] = []
    for index in range(runs):
        if index % 2 == 0:
            mine.append(ours())
            theirs.append(baseline())
        else:
            theirs.append(baseline())
            mine.append(ours())
    return mine, theirs


def _spread(samples: Sequence[float], digits: int) -> dict[str, Any]:
    return {
        "value": round(statistics.median(samples), digits),
        "min": round(min(samples), digits),
        "max": round(max(samples), digits),
        "runs": len(samples),
    }


def figure(
    name: str,
    samples: Sequence[float],
    *,
    unit: str,
    goal: str,
    baseline: Sequence[float] | float | str | None = None,
    digits: int = 4,
    **extra: Any,
) -> dict[str, Any]:
    """A quantity: the median of ``samples`` and their range; ``baseline`` samples
    (measured in the same run) are summarised the same way."""
    entry: dict[str, Any] = {"name": name, **_spread(samples, digits), "unit": unit}
    if isinstance(baseline, Sequence) and not isinstance(baseline, str):
        spread = _spread(baseline, digits)
        entry.update(baseline=spread["value"], baseline_min=spread["min"],
                     baseline_max=spread["max"])
    else:
        entry["baseline"] = baseline
    entry["goal"] = goal
    entry.update(extra)
    return entry


def ratio(
    name: str,
    ours: Sequence[float],
    baseline: Sequence[float],
    *,
    speedup: bool,
    unit: str,
    goal: str,
    baseline_unit: str = "s",
    digits: int = 3,
    **extra: Any,
) -> dict[str, Any]:
    """One ratio per pair of runs, their median and range: ``baseline[i] / ours[i]`` for a
    ``speedup`` (how many times faster podcode is; higher is better), else
    ``ours[i] / baseline[i]`` (how many times longer; lower is better). ``baseline`` is
    the median of the baseline's samples, in ``baseline_unit``."""
    if len(ours) != len(baseline) or not ours:
        raise ValueError("a ratio needs as many runs of podcode as of its baseline, at least one")
    pairs = zip(ours, baseline, strict=True)
    ratios = [b / o if speedup else o / b for o, b in pairs]
    entry = figure(name, ratios, unit=unit, goal=goal, baseline=baseline, digits=digits)
    entry["baseline_unit"] = baseline_unit
    entry.update(extra)
    return entry


def goal_met(entry: dict[str, Any]) -> bool | None:
    """Whether ``value`` meets a goal written ``<= x`` / ``>= x``, or ``<= baseline`` /
    ``>= baseline`` (the entry's own baseline); None when it cannot say."""
    goal = str(entry.get("goal", ""))
    value = entry.get("value")
    relative = re.match(r"^\s*(<=|>=)\s*baseline\b", goal)
    if relative and isinstance(entry.get("baseline"), (int, float)):
        goal = f"{relative.group(1)} {entry['baseline']}"
    match = _GOAL.match(goal)
    if match is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    limit = float(match.group(2))
    return {
        "<=": value <= limit, ">=": value >= limit, "<": value < limit,
        ">": value > limit, "==": value == limit,
    }[match.group(1)]


def normalize(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry of any benchmark, old shape included: ``runs`` defaults to 1 (a single
    measurement, no range), and ``met`` says whether the goal holds."""
    out = dict(entry)
    out.setdefault("runs", 1)
    out["met"] = goal_met(out)
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def filesystem(path: Path) -> str:
    """The type of the filesystem that holds ``path`` (``ext4``, ``tmpfs``, ...)."""
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and (target == fields[1] or target.startswith(
                fields[1].rstrip("/") + "/")) and len(fields[1]) >= len(best):
            best, kind = fields[1], fields[2]
    return kind


def machine() -> dict[str, Any]:
    """The machine the figures were measured on."""
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": _memory_gib(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "load_average": load,
    }
