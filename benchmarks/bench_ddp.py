"""Benchmark of DDP under torchrun (gloo, CPU, 2 ranks): failure to sessions, resume to result.

The job is pytorch/examples' DDP tutorial adapted to CPU
(``tests/ddp_examples/multigpu_torchrun.py``) with rank 1's bug of
``tests/test_ddp_e2e.py`` (its shard ends one past the data: an IndexError at its
last step while rank 0 is in DDP's gradient all-reduce). Two lines of
instrumentation are added to the copy that runs: the moment of rank 1's failure,
and the moment each rank enters ``main``, written to files.

``run()`` returns entries ``{"name", "value", "unit", "baseline", "goal"}`` with the
median, ``min`` and ``max`` of 3 runs (``PODCODE_BENCH_RUNS`` when lower):

- ``ddp_failure_to_all_sessions_s``: from rank 1's exception to both ranks waiting in
  their sessions (``ide="none"``). Without the gloo connections' shutdown rank 0
  would wait in ``loss.backward()`` for gloo's timeout (30 minutes). Goal: at most 5.
- ``ddp_resume_overhead_s``: from the resume (the control API's POST, forwarded to the
  other rank) to torchrun's exit with the fixed result, less the same remaining work
  without podcode: the fixed script run with podcode off, from its last rank entering
  ``main`` to torchrun's exit (``main`` runs again whole on resume), measured in the
  same run. Goal: at most 10. It can be below zero: the resumed ranks are warm (torch's
  lazy initialisation, the first DDP and autograd passes are behind them), the baseline
  is a cold run. The baseline job may end with torch's own abort at teardown, once
  a rank is done and rank 0 prints its result (seen with podcode not imported): as in the tests
  (``tests/torchrun_job.torch_teardown_crash``), that run counts; any other failure
  of it stops the benchmark.

Run: ``python benchmarks/run.py --merge bench_ddp`` (needs torch).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RUNS, figure  # noqa: E402
from tests import torchrun_job  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "ddp_examples" / "multigpu_torchrun.py"
SCRIPT = ("multigpu_torchrun.py", "2", "1")
BUG = ("for _ in range(size)]", "for _ in range(size - 1)]")
FAILED = (
    "        return self.data[index]\n",
    "        if index >= len(self.data):\n"
    "            open('failed_at', 'w').write(repr(__import__('time').time()))\n"
    "        return self.data[index]\n",
)
ENTERED = (
    "    if setup:\n        ddp_setup()\n",
    "    open(f\"main_{os.environ['RANK']}\", 'w').write(repr(__import__('time').time()))\n"
    "    if setup:\n        ddp_setup()\n",
)


def instrumented(workspace: Path, *edits: tuple[str, str],
                 failed: tuple[str, str] = FAILED) -> Path:
    """The example in ``workspace``, stamping when it fails (``failed``) and when each rank
    enters ``main``, with ``edits`` made after (also used by ``bench_multipod_job``)."""
    workspace.mkdir(parents=True)
    script = Path(shutil.copy(EXAMPLE, workspace / EXAMPLE.name))
    text = script.read_text()
    for old, new in (failed, ENTERED, *edits):
        if old not in text:
            raise RuntimeError(f"{EXAMPLE.name} no longer has {old!r}")
        text = text.replace(old, new)
    script.write_text(text)
    return script


def stamp(path: Path) -> float:
    """The time a stamp file written by the instrumented example holds."""
    return float(path.read_text())


def baseline(folder: Path) -> float:
    """The fixed job with podcode off: both ranks in ``main`` to torchrun's exit."""
    workspace = folder / "fixed"
    instrumented(workspace)
    log = folder / "fixed.log"
    with open(log, "w") as out:
        proc = torchrun_job.start(workspace, {"PODCODE_ENABLE": "0"}, out, script=SCRIPT)
    try:
        code = proc.wait(300)
        ended = time.time()
    finally:
        torchrun_job.stop_tree(proc)
    output = log.read_text()
    # torch's own abort at teardown, after the result was printed, is the program's result
    # all the same (as in the tests); anything else is a failure of the reference job.
    if code != 0 and not torchrun_job.torch_teardown_crash(output):
        raise RuntimeError(f"the fixed job failed ({code}):\n{output}")
    return ended - max(stamp(workspace / f"main_{rank}") for rank in (0, 1))


def measure(folder: Path) -> tuple[float, float]:
    """(rank 1's failure to both sessions waiting, resume to torchrun's exit)."""
    workspace = folder / "failing"
    script = instrumented(workspace, BUG)
    job = torchrun_job.Torchrun(workspace, folder / "home", SCRIPT)
    try:
        while not all(
            (record := job.record(rank)) and record["state"] == "waiting" for rank in (0, 1)
        ):
            if job.proc.poll() is not None:
                raise RuntimeError(f"torchrun exited:\n{job.output()}")
            time.sleep(0.02)
        in_sessions = time.time() - stamp(workspace / "failed_at")
        script.write_text(script.read_text().replace(BUG[1], BUG[0]))
        record = job.record(0)
        assert record is not None
        resumed = time.time()
        torchrun_job.post(record, "/api/resume")
        if job.proc.wait(300) != 0:
            raise RuntimeError(f"the resumed job failed:\n{job.output()}")
        return in_sessions, time.time() - resumed
    finally:
        job.stop()


def run(runs: int = min(RUNS, 3)) -> list[dict[str, Any]]:
    to_sessions, resumes, baselines = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="podcode-bench-ddp-") as folder:
            baselines.append(baseline(Path(folder)))
            in_sessions, resume = measure(Path(folder))
        to_sessions.append(in_sessions)
        resumes.append(resume)
    overheads = [r - b for r, b in zip(resumes, baselines, strict=True)]
    return [
        figure("ddp_failure_to_all_sessions_s", to_sessions, unit="s", goal="<= 5",
               digits=3),
        figure("ddp_resume_overhead_s", overheads, unit="s", goal="<= 10",
               baseline=baselines, digits=3,
               baseline_is="the fixed job, podcode off, last rank entering main to exit",
               resume_to_result_s=round(statistics.median(resumes), 3)),
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
