"""Ray Tune and the bug board under real faults, on a real local cluster.

``tune_resume_overhead_s``: Tune's ``custom_func_checkpointing`` example as published
(``stop={"training_iteration": 10}``, its random search replaced by a 2x2 grid) with a
misspelt config key that every trial hits at its start: one session opens, the three
other trials wait on the board. The figure is the time from the resume (``POST
/api/resume``) to ``Tuner.fit()`` returning, less the same span of the fixed program run
without podcode: from its training's start (the earliest trial's first line past the
bug, once Tune has started its trials) to ``Tuner.fit()`` returning: the same training,
every trial's ten iterations.

``dead_owner_release_s``: two tasks hit one bug; the worker of the first, whose session
waits, is SIGKILLed; seconds until the task that waited on it is in a session of its own.

Run: ``python benchmarks/run.py bench_tune`` (needs ``ray[tune]``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import figure  # noqa: E402
from interactive.base.control_client import ControlClient  # noqa: E402
from tests.ray_cluster import Cluster, ray_cluster  # noqa: E402
from tests.ray_driver import TUNE_STOPPED  # noqa: E402
from tests.test_ray import ORPHANED  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

RUNS = 3
BUG = '    width, height = config["width"], config["hieght"]\n'
TIMED = TUNE_STOPPED.replace(BUG, BUG + "    began = time.time()\n").replace(
    '"mean_loss": intermediate_score}', '"mean_loss": intermediate_score, "began": began}',
).replace("    results = tuner.fit()\n", """\
    results = tuner.fit()
    began = min(result.metrics_dataframe["began"].min() for result in results)
    print("FIT", began, time.time(), flush=True)
""")
"""The example, printing when its training began (the earliest trial's first line past the
bug, after Tune's start-up and, with podcode, after the resume) and when ``Tuner.fit()``
returned."""


def _records(home: Path, state: str = "waiting") -> list[dict[str, Any]]:
    found = []
    for path in (home / "sessions").glob("*/session.json"):
        try:
            record: dict[str, Any] = json.loads(path.read_text())
        except ValueError:
            continue
        if record.get("state") == state:
            found.append(record)
    return found


def _driver(cluster: Cluster, root: Path, text: str, enable: str) -> tuple[subprocess.Popen[bytes],
                                                                           Path, Path]:
    project, home, log = root / "project", root / "home", root / "driver.log"
    project.mkdir(parents=True)
    (project / "driver.py").write_text(text)
    env = cluster.driver_env(PODCODE_ENABLE=enable, PODCODE_HOME=str(home),
                             RAY_DEDUP_LOGS="0")  # every worker's line, to count them
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "driver.py"], cwd=project, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    return proc, home, log


def _finish(proc: subprocess.Popen[bytes], log: Path) -> str:
    try:
        if proc.wait(150) != 0:
            raise RuntimeError(f"the driver failed:\n{log.read_text()[-3000:]}")
    except subprocess.TimeoutExpired:
        said = [line for line in log.read_text(errors="replace").splitlines() if "podcode" in line]
        raise RuntimeError("the driver did not end; podcode said:\n" + "\n".join(said)) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return log.read_text(errors="replace")


def _fit(output: str) -> tuple[float, float]:
    line = next(line for line in output.splitlines() if line.startswith("FIT"))
    return float(line.split()[1]), float(line.split()[2])


def tune_once(cluster: Cluster) -> tuple[float, float]:
    """(seconds from the resume to fit() returning, fit() of the fixed program alone)."""
    fixed = TIMED.replace('config["hieght"]', 'config["height"]')
    with tempfile.TemporaryDirectory(prefix="podcode-bench-tune-") as scratch:
        proc, _, log = _driver(cluster, Path(scratch) / "off", fixed, "0")
        started, ended = _fit(_finish(proc, log))
        baseline = ended - started
        proc, home, log = _driver(cluster, Path(scratch) / "on", TIMED, "1")
        try:
            record = wait_until(lambda: (_records(home) or [None])[0], "the session", 180, 0.05)
            wait_until(lambda: log.read_text(errors="replace").count("waits for its outcome")
                       >= 3, "the three other trials waiting", 120, 0.05)
            if len(_records(home)) != 1:
                raise RuntimeError(f"one bug opened {len(_records(home))} sessions")
            script = Path(record["workspace"]) / "driver.py"
            script.write_text(script.read_text().replace('config["hieght"]', 'config["height"]'))
            resumed = time.time()
            ControlClient(record["control_url"], record["token"]).resume()
        except BaseException:
            proc.kill()
            raise
        _, ended = _fit(_finish(proc, log))
    return ended - resumed, baseline


def dead_owner_once(cluster: Cluster) -> float:
    with tempfile.TemporaryDirectory(prefix="podcode-bench-owner-") as scratch:
        proc, home, log = _driver(cluster, Path(scratch), ORPHANED, "1")
        try:
            (first,) = wait_until(lambda: _records(home), "the session", 180, 0.05)
            wait_until(lambda: "waits for its outcome" in log.read_text(errors="replace"),
                       "the other task waiting", 120, 0.05)
            os.kill(first["pid"], signal.SIGKILL)
            killed = time.monotonic()
            second = wait_until(lambda: [r for r in _records(home) if r["pid"] != first["pid"]],
                                "the waiting task's own session", 120, 0.05)[0]
            released = time.monotonic() - killed
            ControlClient(second["control_url"], second["token"]).abort()
        finally:
            if proc.poll() is None:
                proc.wait(120)
    return released


def run() -> list[dict[str, Any]]:
    try:
        import ray  # noqa: F401
        from ray import tune  # noqa: F401
    except ImportError:
        return []
    with ray_cluster() as cluster:
        tuned = [tune_once(cluster) for _ in range(RUNS)]
        released = [dead_owner_once(cluster) for _ in range(RUNS)]
    return [
        figure("tune_resume_overhead_s", [ours - base for ours, base in tuned], unit="s",
               goal="<= 5", digits=2, baseline=[base for _, base in tuned],
               measures="resume to Tuner.fit() returning (4 trials, one bug, stop= at 10 "
                        "iterations), less the baseline",
               baseline_is="the fixed program without podcode, its training's start to "
                           "Tuner.fit() returning (s)"),
        figure("dead_owner_release_s", released, unit="s", goal="<= 10", digits=2,
               measures="SIGKILL of a bug's session owner to the task that waited on it "
                        "in a session of its own",
               baseline_is="none: an absolute goal"),
    ]


if __name__ == "__main__":
    for entry in run():
        print(json.dumps(entry))
