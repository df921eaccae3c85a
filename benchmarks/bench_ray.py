"""Ray: one bug hit by many tasks of a job, and the time from resume to the driver's result.

A real local cluster (``ray start --head``, four CPUs, none of podcode's settings in its
environment); a driver (``python driver.py``, ``working_dir="."``, PODCODE_ENABLE set
only there) maps a ``@vscode`` remote function over ``TASKS`` inputs that all hit one
bug. Once the first session waits, the copy's file is fixed and the session resumed
(``POST /api/resume``).

``sessions_per_bug``: sessions opened in the job (goal 1: every other task waits for that
session's outcome, or takes its fix at once).

``ray_resume_to_result_s``: seconds from the resume to the driver's ``ray.get`` of all
``TASKS`` results returning (each task that hit the bug is fixed and run again).

Run: ``python benchmarks/bench_ray.py`` (needs ``ray``: the ``[ray]`` extra).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import figure  # noqa: E402
from interactive.base.control_client import ControlClient  # noqa: E402
from tests.ray_cluster import Cluster, ray_cluster  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

RUNS = 3
TASKS = 100
DRIVER = textwrap.dedent("""
    # run %(run)s: a package of its own (a node keeps the copy of a package it unpacked)
    import time
    import ray
    from interactive import vscode


    @ray.remote(max_retries=0)
    @vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
    def work(x):
        return x // 0


    if __name__ == "__main__":
        ray.init(runtime_env={"working_dir": "."})
        results = ray.get([work.remote(x) for x in range(%(tasks)s)])
        print("DONE", time.time(), sum(results), flush=True)
""")


def _waiting(home: Path) -> dict[str, Any] | None:
    for path in (home / "sessions").glob("*/session.json"):
        try:
            record: dict[str, Any] = json.loads(path.read_text())
        except ValueError:
            continue
        if record.get("state") == "waiting":
            return record
    return None


def one_job(cluster: Cluster, run: int) -> tuple[float, int]:
    """(seconds from resume to the driver's result, sessions opened)."""
    with tempfile.TemporaryDirectory(prefix="podcode-bench-ray-") as scratch:
        root = Path(scratch)
        project, home, log = root / "project", root / "home", root / "driver.log"
        project.mkdir()
        (project / "driver.py").write_text(DRIVER % {"run": run, "tasks": TASKS})
        env = cluster.driver_env(PODCODE_ENABLE="1", PODCODE_HOME=str(home))
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "driver.py"], cwd=project, env=env,
                                    stdout=out, stderr=subprocess.STDOUT)
        try:
            record = wait_until(lambda: _waiting(home), "the session", 180, 0.02)
            script = Path(record["workspace"]) / "driver.py"
            script.write_text(script.read_text().replace("x // 0", "x * 2"))
            started = time.time()
            ControlClient(record["control_url"], record["token"]).resume()
            if proc.wait(300) != 0:
                raise RuntimeError(f"the driver failed:\n{log.read_text()[-3000:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = log.read_text(errors="replace")
        done = next(line for line in output.splitlines() if line.startswith("DONE"))
        if int(done.split()[2]) != TASKS * (TASKS - 1):
            raise RuntimeError(f"wrong result: {done}")
        return float(done.split()[1]) - started, output.count("opening a debug session")


def run() -> list[dict[str, Any]]:
    try:
        import ray  # noqa: F401
    except ImportError:
        return []
    with ray_cluster() as cluster:
        samples = [one_job(cluster, index) for index in range(RUNS)]
    return [
        figure("sessions_per_bug", [float(s) for _, s in samples], unit="sessions",
               goal="== 1", digits=0, tasks=TASKS),
        figure("ray_resume_to_result_s", [t for t, _ in samples], unit="s", goal="<= 2",
               digits=3, tasks=TASKS),
    ]


if __name__ == "__main__":
    for entry in run():
        print(json.dumps(entry))
