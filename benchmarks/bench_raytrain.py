"""Benchmark of Ray Train's ``TorchTrainer`` (2 CPU workers, DDP over gloo) under podcode,
on a real local cluster: failure to every worker stopped, resume to ``fit()`` returning.

The job is Ray Train's ``torch_linear_example.py`` (``tests/ray_examples/``) with rank
1's bug of ``tests/test_ray_train.py`` (an off-by-one in the dataset that only rank 1's
shard reaches, at its last batch of the first epoch, while rank 0 is in DDP's gradient
all-reduce). Three lines of instrumentation are added to the copy that runs: the moment
of rank 1's failure, the moment each worker enters ``train_func``, and the moment
``fit()`` returns, written to files.

``run()`` returns entries ``{"name", "value", "unit", "baseline", "goal"}`` with the
median, ``min`` and ``max`` of 3 runs (``PODCODE_BENCH_RUNS`` when lower):

- ``raytrain_failure_to_all_sessions_s``: from rank 1's exception to rank 1 waiting in
  its session (``ide="none"``) and rank 0, broken out of the all-reduce, saying in the
  driver's output that it waits on that session's bug (Ray's log forwarding included).
  Goal: at most 10.
- ``raytrain_resume_overhead_s``: from the resume (the control API's POST, the fix
  already written in the session's workspace) to ``fit()`` returning, less the same
  remaining work without podcode: the fixed example run with podcode off, from its last
  worker entering ``train_func`` to ``fit()`` returning (``train_func`` runs again whole
  on resume), measured in the same run. Goal: at most 15.

Run: ``python benchmarks/run.py --merge bench_raytrain`` (needs ``ray[train]`` and torch).
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RUNS, figure  # noqa: E402
from tests.ray_cluster import Cluster, ray_cluster  # noqa: E402
from tests.ray_train_job import EXAMPLE, ONE_RANK, TrainJob  # noqa: E402
from tests.torchrun_job import fix, post  # noqa: E402

WAITS = "holds no session of its own"
"""What a worker waiting on the board says in the driver's output."""


def _stamp(stamps: Path, name: str) -> str:
    """A line of Python that writes the time now to ``stamps/<name>`` (``name``: an
    expression)."""
    return f"open({str(stamps)!r} + '/' + {name}, 'w').write(repr(__import__('time').time()))"


def instrument(stamps: Path, script: Path) -> None:
    """The moments of rank 1's failure, each worker's entry and ``fit()``'s return."""
    failed, entered = _stamp(stamps, "'failed_at'"), _stamp(stamps, "str(os.getpid())")
    returned = _stamp(stamps, "'fit_returned'")
    edits = [
        (f"        {ONE_RANK[1]}\n",
         f"        if index + 1 >= len(self.x):\n            {failed}\n        {ONE_RANK[1]}\n"),
        ("    data_size = config.get", f"    {entered}\n    data_size = config.get"),
        ("    result = trainer.fit()\n", f"    result = trainer.fit()\n    {returned}\n"),
    ]
    text = script.read_text()
    for old, new in edits:
        if old not in text:
            raise RuntimeError(f"{EXAMPLE.name} no longer has {old!r}")
        text = text.replace(old, new, 1)
    script.write_text(text)


def _time(path: Path) -> float:
    return float(path.read_text())


def _buggy(stamps: Path, fixed: bool, script: Path) -> None:
    """Rank 1's bug in the copy, instrumented; ``fixed``: then fixed again."""
    text = script.read_text()
    script.write_text(text.replace(ONE_RANK[0], ONE_RANK[1]) if fixed else text)
    instrument(stamps, script)
    if fixed:
        script.write_text(script.read_text().replace(ONE_RANK[1], ONE_RANK[0]))


def baseline(cluster: Cluster, folder: Path) -> float:
    """The fixed job with podcode off: its last worker entering ``train_func`` to ``fit()``
    returning."""
    stamps = folder / "stamps"
    stamps.mkdir(parents=True)
    job = TrainJob(cluster, folder, None, enabled=False,
                   prepare=functools.partial(_buggy, stamps, True))
    job.finish(300)
    entered = max(_time(path) for path in stamps.glob("[0-9]*"))
    return _time(stamps / "fit_returned") - entered


def measure(cluster: Cluster, folder: Path) -> tuple[float, float]:
    """(rank 1's failure to every worker stopped, resume to ``fit()`` returning)."""
    stamps = folder / "stamps"
    stamps.mkdir(parents=True)
    job = TrainJob(cluster, folder, ONE_RANK, prepare=functools.partial(_buggy, stamps, False))
    try:
        while not (len(job.waiting()) == 1 and WAITS in job.output()):
            time.sleep(0.02)
        stopped = time.time() - _time(stamps / "failed_at")
        (record,) = job.waiting()
        fix(Path(record["workspace"]) / EXAMPLE.name, ONE_RANK)
        resumed = time.time()
        post(record, "/api/resume")
        job.finish(300)
        return stopped, _time(stamps / "fit_returned") - resumed
    finally:
        job.stop()


def run(runs: int = min(RUNS, 3)) -> list[dict[str, Any]]:
    to_sessions, resumes, baselines = [], [], []
    with ray_cluster(cpus=4) as cluster:
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="podcode-bench-raytrain-") as folder:
                baselines.append(baseline(cluster, Path(folder) / "off"))
                in_sessions, resume = measure(cluster, Path(folder) / "on")
            to_sessions.append(in_sessions)
            resumes.append(resume)
    overheads = [r - b for r, b in zip(resumes, baselines, strict=True)]
    return [
        figure("raytrain_failure_to_all_sessions_s", to_sessions, unit="s", goal="<= 10",
               digits=3),
        figure("raytrain_resume_overhead_s", overheads, unit="s", goal="<= 15",
               baseline=baselines, digits=3,
               baseline_is="the fixed example, podcode off, last worker entering train_func "
                           "to fit() returning",
               resume_to_result_s=round(statistics.median(resumes), 3)),
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
