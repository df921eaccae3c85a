"""Benchmark of a distributed failure: how soon every rank of the pod is in a session.

``run()`` returns entries ``{"name", "value", "unit", "baseline", "goal"}``:

- ``ranks_in_session_ratio``: wall seconds from ``torchrun --nproc-per-node 2``
  starting ``examples/distributed/allreduce.py`` (rank 1 fails before the
  all-reduce) until both ranks' sessions wait (``ide="none"``), divided by the
  baseline: the same job with the bug fixed and podcode off, start to exit,
  measured in the same run. Without the process-group abort, rank 0 would wait
  for its collective's timeout (30 minutes by default). Goal: at most 3.

Run: ``python benchmarks/bench_ranks.py`` (needs torch).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "distributed" / "allreduce.py"
BUG = 'raise ValueError(f"bad batch on rank {rank}")'


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _torchrun(workspace: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_port()),
        "allreduce.py",
    ]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.Popen(
        command,
        cwd=workspace,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _waiting(home: Path) -> bool:
    for rank in (0, 1):
        try:
            record = json.loads((home / f"rank-{rank}" / "session.json").read_text())
        except (OSError, ValueError):
            return False
        if record.get("state") != "waiting":
            return False
    return True


def _stop(proc: subprocess.Popen[bytes]) -> None:
    import psutil

    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs(tree, timeout=10)


def measure(folder: Path) -> tuple[float, float]:
    fixed = folder / "fixed"
    failing = folder / "failing"
    for workspace in (fixed, failing):
        workspace.mkdir()
        shutil.copy(EXAMPLE, workspace / "allreduce.py")
    script = fixed / "allreduce.py"
    script.write_text(script.read_text().replace(BUG, "pass"))
    started = time.perf_counter()
    if _torchrun(fixed, {"PODCODE_ENABLE": "0"}).wait(300) != 0:
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
    proc = _torchrun(failing, env)
    try:
        while not _waiting(home):
            if proc.poll() is not None or time.perf_counter() - started > 300:
                raise RuntimeError("the ranks never both waited")
            time.sleep(0.05)
        return time.perf_counter() - started, baseline
    finally:
        _stop(proc)


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="podcode-bench-ranks-") as folder:
        value, baseline = measure(Path(folder))
    return [
        {
            "name": "ranks_in_session_ratio",
            "value": round(value / baseline, 3),
            "unit": "x",
            "baseline": round(baseline, 3),
            "goal": 3.0,
        }
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
