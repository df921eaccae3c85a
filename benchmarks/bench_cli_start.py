"""How fast the ``podcode`` command starts.

``cli_help_s``: wall time of ``podcode --help`` (a new process: Python's start, the
imports, the parser). Baseline, in the same run: ``python -c pass`` with the same
interpreter. The Kubernetes client loads only in the verbs that reach a cluster.

Run: ``python benchmarks/bench_cli_start.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import figure, interleaved  # noqa: E402

RUNS = 9
PODCODE = str(Path(sys.executable).with_name("podcode"))


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def run() -> list[dict[str, Any]]:
    ours, baseline = interleaved(lambda: wall([PODCODE, "--help"]),
                                 lambda: wall([sys.executable, "-c", "pass"]), runs=RUNS)
    return [figure("cli_help_s", ours, unit="s", goal="<= 0.05", baseline=baseline, digits=3)]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
