"""Core figures: decorator overhead, input capture speed, resume latency."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import timeit
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np


def overhead_us_per_call(calls: int = 200_000) -> dict[str, Any]:
    os.environ["PODCODE_ENABLE"] = "1"
    from interactive import vscode

    def bare(x: int) -> int:
        return x + 1

    wrapped = vscode(ide="none")(bare)
    wrapped(1)  # first call installs the SIGTERM handler
    bare_s = min(timeit.repeat(lambda: bare(1), number=calls, repeat=5)) / calls
    wrapped_s = min(timeit.repeat(lambda: wrapped(1), number=calls, repeat=5)) / calls
    return {
        "name": "overhead_us_per_call",
        "value": round((wrapped_s - bare_s) * 1e6, 3),
        "unit": "us",
        "baseline": round(bare_s * 1e6, 3),
        "goal": "<= 10",
    }


def capture_throughput_ratio(total_mib: int = 512, arrays: int = 8) -> dict[str, Any]:
    from interactive.capture import load_inputs, save_inputs

    rng = np.random.default_rng(0)
    data = [rng.random((total_mib * 1024 * 1024) // 8 // arrays) for _ in range(arrays)]
    folder = Path(
        tempfile.mkdtemp(prefix="podcode-bench-", dir=os.environ.get("PODCODE_BENCH_DIR"))
    )
    try:

        def baseline() -> None:
            for index, array in enumerate(data):
                np.save(folder / f"a{index}.npy", array)
            for index in range(arrays):
                np.load(folder / f"a{index}.npy")

        def ours() -> None:
            save_inputs("bench.task", baseline, (data,), {}, folder / "home")
            load_inputs("bench.task", folder / "home")

        baseline_times, ours_times = [], []
        for _ in range(5):  # interleaved, so both see the same disk and page-cache weather
            baseline_times.append(timeit.timeit(baseline, number=1))
            ours_times.append(timeit.timeit(ours, number=1))
        baseline_s, ours_s = min(baseline_times), min(ours_times)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "name": "capture_throughput_ratio",
        "value": round(baseline_s / ours_s, 3),
        "unit": "x",
        "baseline": round(baseline_s, 3),
        "goal": ">= 0.8",
    }


JOB = textwrap.dedent("""
    from interactive import vscode

    @vscode(ide="none", port=0, control_port=0, debug_port=0)
    def task(x):
        print("task started", flush=True)
        raise RuntimeError("broken")
        return x

    if __name__ == "__main__":
        task(1)
""")


def resume_latency_s(rounds: int = 5) -> dict[str, Any]:
    """From ``POST /api/resume`` to the task running again, with the fix (an edit of the
    task's own file) patched in. An absolute goal: there is no comparable baseline."""
    samples = []
    for _ in range(rounds):
        root = Path(tempfile.mkdtemp(prefix="podcode-bench-"))
        (root / "job.py").write_text(JOB)
        env = {
            **os.environ,
            "PODCODE_ENABLE": "1",
            "PODCODE_HOME": str(root / "home"),
            "PYTHONUNBUFFERED": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "job.py"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "task started"
            record = _wait_waiting(root / "home" / "session.json")
            fixed = JOB.replace('raise RuntimeError("broken")', "pass")
            (root / "job.py").write_text(fixed)
            os.utime(root / "job.py", ns=(time.time_ns() + 10**7,) * 2)
            request = urllib.request.Request(
                record["control_url"] + "/api/resume",
                method="POST",
                headers={"Authorization": f"Bearer {record['token']}"},
            )
            started = time.perf_counter()
            urllib.request.urlopen(request, b"", timeout=10).close()
            while proc.stdout.readline().strip() != "task started":
                pass
            samples.append(time.perf_counter() - started)
            proc.wait(30)
        finally:
            proc.kill()
            proc.wait()
            shutil.rmtree(root, ignore_errors=True)
    return {
        "name": "resume_latency_s",
        "value": round(statistics.median(samples), 4),
        "min": round(min(samples), 4),
        "max": round(max(samples), 4),
        "runs": len(samples),
        "unit": "s",
        "baseline": None,
        "goal": "<= 0.3 (absolute)",
    }


def _wait_waiting(path: Path, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record: dict[str, Any] = json.loads(path.read_text())
            if record["state"] == "waiting":
                return record
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.02)
    raise TimeoutError("no session")


def run() -> list[dict[str, Any]]:
    return [overhead_us_per_call(), capture_throughput_ratio(), resume_latency_s()]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
