"""sessions_opened_concurrently: how many of N sessions started at the same moment, with
the same configured ports and each with its own code-server, open (waiting, with their
own control API, debugger and IDE) within the IDE wait.

All N processes are started back to back with identical ``port``, ``control_port`` and
``debug_port``; each must end up on distinct ports. Several rounds; the figure is the
worst round (goal: N of N every time), with the median seconds until the last opened.

Run: ``python benchmarks/bench_concurrency.py`` (needs code-server).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

SESSIONS = 8
ROUNDS = 3
OPEN_TIMEOUT_SECONDS = 120.0
JOB = textwrap.dedent("""
    from interactive import vscode

    @vscode(port={base}, control_port={control}, debug_port={debug})
    def task():
        raise RuntimeError("broken")

    task()
""")


def _base_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return min(int(probe.getsockname()[1]), 60000)


def _record(home: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((home / "session.json").read_text())
        return data
    except (FileNotFoundError, ValueError):
        return None


def one_round(root: Path) -> tuple[int, float]:
    """(sessions fully open with distinct ports, seconds until the last one opened)."""
    base = _base_port()
    (root / "job.py").write_text(JOB.format(base=base, control=base + 30, debug=base + 60))
    procs, homes = [], []
    started = time.perf_counter()
    for index in range(SESSIONS):
        home = root / f"home{index}"
        env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home)}
        procs.append(subprocess.Popen(
            [sys.executable, "job.py"], cwd=root, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        homes.append(home)
    opened: dict[int, dict[str, Any]] = {}
    last = 0.0
    try:
        deadline = time.monotonic() + OPEN_TIMEOUT_SECONDS
        while len(opened) < SESSIONS and time.monotonic() < deadline:
            for index, home in enumerate(homes):
                record = _record(home)
                ready = record and record["state"] == "waiting" and record["code_server_url"]
                if index not in opened and ready:
                    opened[index] = record
                    last = time.perf_counter() - started
            time.sleep(0.1)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    records = list(opened.values())
    distinct = (
        len({r["control_url"] for r in records}) == len(records)
        and len({r["debug"]["port"] for r in records}) == len(records)
        and len({r["code_server_url"] for r in records}) == len(records)
    )
    return (len(records) if distinct else 0), last


def run() -> list[dict[str, Any]]:
    counts, seconds = [], []
    for _ in range(ROUNDS):
        root = Path(tempfile.mkdtemp(prefix="podcode-bench-concurrent-"))
        try:
            count, last = one_round(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        counts.append(count)
        seconds.append(last)
    return [
        {
            "name": "sessions_opened_concurrently",
            "value": min(counts),
            "min": min(counts),
            "max": max(counts),
            "runs": ROUNDS,
            "unit": f"of {SESSIONS}",
            "baseline": None,
            "goal": f"== {SESSIONS}",
            "seconds_to_last_open_median": round(statistics.median(seconds), 2),
        }
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
