"""Benchmark of a distributed failure: how soon every rank of the pod is in a session.

``run()`` returns entries ``{"name", "value", "unit", "baseline", "goal"}`` with the
median, ``min`` and ``max`` of 3 runs (``PODCODE_BENCH_RUNS`` when lower):

- ``ranks_in_session_ratio``: wall seconds from ``torchrun --nproc-per-node 2``
  starting ``examples/distributed/allreduce.py`` (rank 1 fails before the
  all-reduce) until both ranks' sessions wait (``ide="none"``), divided by the
  baseline: the same job with the bug fixed and podcode off, start to exit,
  measured in the same run. Without the process-group abort, rank 0 would wait
  for its collective's timeout (30 minutes by default). Goal: at most 3.

Run: ``python benchmarks/bench_ranks.py`` (needs torch).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RUNS, ratio  # noqa: E402
from tests import torchrun_job  # noqa: E402


def _waiting(home: Path) -> bool:
    for rank in (0, 1):
        try:
            record = json.loads((home / f"rank-{rank}" / "session.json").read_text())
        except (OSError, ValueError):
            return False
        if record.get("state") != "waiting":
            return False
    return True


def measure(folder: Path) -> tuple[float, float]:
    fixed, failing = folder / "fixed", folder / "failing"
    torchrun_job.copy_example(fixed, fixed=True)
    torchrun_job.copy_example(failing)
    started = time.perf_counter()
    if torchrun_job.start(fixed, {"PODCODE_ENABLE": "0"}).wait(300) != 0:
        raise RuntimeError("the fixed job failed")
    baseline = time.perf_counter() - started
    home = folder / "home"
    env = {
        "PODCODE_ENABLE": "1",
        "PODCODE_HOME": str(home),
        "PODCODE_DEBUG_PORT": "0",
        "PODCODE_CONTROL_PORT": "0",
    }
    started = time.perf_counter()
    proc = torchrun_job.start(failing, env)
    try:
        while not _waiting(home):
            if proc.poll() is not None or time.perf_counter() - started > 300:
                raise RuntimeError("the ranks never both waited")
            time.sleep(0.05)
        return time.perf_counter() - started, baseline
    finally:
        torchrun_job.stop_tree(proc)


def run(runs: int = min(RUNS, 3)) -> list[dict[str, Any]]:
    values, baselines = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="podcode-bench-ranks-") as folder:
            value, baseline = measure(Path(folder))
        values.append(value)
        baselines.append(baseline)
    return [ratio("ranks_in_session_ratio", values, baselines, speedup=False, unit="x",
                  goal="<= 3.0", baseline_is="the fixed job, podcode off, start to exit")]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
