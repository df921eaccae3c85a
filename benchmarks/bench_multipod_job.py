"""Benchmark of one job over two pods (torchrun agents ``--nnodes 2``, 2 ranks each, DDP
over gloo on CPU): a failure to every rank's session, one resume to the job's result.

The job is ``tests/ddp_examples/multigpu_torchrun.py`` (``2 1``) with the bug of
``tests/test_multipod_session.py`` that only global rank 2 (the second pod's local
rank 0) hits: it reads past the data at its last sample (index 254), an IndexError
while the other ranks are in DDP's gradient all-reduce. As in that test, two torchrun
agents on one machine stand for two pods (node ranks 0 and 1, the first serving the
job's store), each with its own copy of the code, ``PODCODE_HOME``, ports and
``POD_NAME``, and the job's secret (``PODCODE_JOB_SECRET``); ``PODCODE_IDE=none``: the
serving pod's session starts no IDE (the figures leave the IDE's start out, as
``bench_ddp`` does). Two lines of instrumentation are added to every copy (the same
in both pods, so the fix applies to each): the moment global rank 2 reaches its last
sample, just before it fails, and the moment each rank enters ``main``, written to
files in its pod's copy.

``run()`` returns entries with the median, ``min`` and ``max`` of 3 runs
(``PODCODE_BENCH_RUNS`` when lower), as ``bench_ddp``:

- ``multipod_failure_to_all_sessions_s``: from rank 2's exception to all 4 ranks, both
  pods, waiting in their sessions (each rank's ``<home>/rank-<local>/session.json``
  in state ``waiting``). Goal: at most 5.
- ``multipod_resume_overhead_s``: from one resume (the control API's POST on the
  failing pod's rank 2, the fix made in that pod's copy only: the job's store carries
  it to the other pod) to both torchrun agents' exit with the fixed result, less the
  same remaining work without podcode: the fixed program run with podcode off by two
  agents laid out the same way, from its last rank entering ``main`` to the last
  agent's exit (``main`` runs again whole on resume), measured in the same run. Goal:
  at most 10. It can be below zero: the resumed ranks are warm, the baseline is a cold
  run. Every resumed job's checksum must be the reference's (the fixed program under
  one agent with 4 ranks and podcode off, ``tests/torchrun_job.reference``), and the
  baseline's too, else the benchmark fails. A baseline job may end with torch's own
  abort at teardown, once a rank is done and rank 0 prints its result
  (``tests/torchrun_job.torch_teardown_crash``): that run counts; any other failure of
  it stops the benchmark.

Run: ``python benchmarks/run.py --merge bench_multipod_job`` (needs torch).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_ddp import EXAMPLE, SCRIPT, instrumented, stamp  # noqa: E402
from benchmarks.harness import RUNS, figure  # noqa: E402
from tests import torchrun_job  # noqa: E402

PODS = ("train-multi-0", "train-multi-1")
LOCAL_RANKS = (0, 1)
SECRET = "a-secret-the-job's-pods-share-0123456789"
BUG = ("return self.data[index]", "return self.data[index if index != 254 else len(self.data)]")
"""Index 254 is global rank 2's last sample (of 4 ranks): read past the data, IndexError."""
FAILED = (
    "        return self.data[index]\n",
    "        if index == 254:\n"
    "            open('failed_at', 'w').write(repr(__import__('time').time()))\n"
    "        return self.data[index]\n",
)
TIMEOUT = 300.0


def _wait_all(jobs: list[torchrun_job.Torchrun]) -> tuple[list[int], float]:
    """Each agent's exit code, and when the last one exited (``time.time()``)."""
    deadline = time.monotonic() + TIMEOUT
    while any(job.proc.poll() is None for job in jobs):
        if time.monotonic() > deadline:
            output = "\n".join(job.output() for job in jobs)
            raise RuntimeError(f"the job's agents did not exit in {TIMEOUT:.0f} s:\n{output}")
        time.sleep(0.01)
    ended = time.time()
    return [int(job.proc.returncode) for job in jobs], ended


def _pods(folder: Path, env: dict[str, str], *edits: tuple[str, str]
          ) -> list[torchrun_job.Torchrun]:
    """The two pods' agents, each on its own copy of the example (``edits`` made)."""
    port = torchrun_job.free_port()
    jobs: list[torchrun_job.Torchrun] = []
    try:
        for node, pod in enumerate(PODS):
            instrumented(folder / pod / "workspace", *edits, failed=FAILED)
            jobs.append(torchrun_job.Torchrun(
                folder / pod / "workspace", folder / pod / "home", SCRIPT,
                env={"POD_NAME": pod, "PODCODE_JOB_SECRET": SECRET, "PODCODE_IDE": "none",
                     **env},
                command=torchrun_job.agent(node, len(PODS), len(LOCAL_RANKS), port)))
    except BaseException:
        for job in jobs:
            job.stop()
        raise
    return jobs


def reference(folder: Path) -> str:
    """The fixed program's checksum, podcode off, one agent with 4 ranks."""
    folder.mkdir(parents=True)
    return torchrun_job.reference(folder, EXAMPLE, SCRIPT, nproc=len(PODS) * len(LOCAL_RANKS))


def baseline(folder: Path, expected: str) -> float:
    """The fixed job with podcode off, on two agents: its last rank entering ``main`` to
    the last agent's exit."""
    jobs = _pods(folder, {"PODCODE_ENABLE": "0"})
    try:
        codes, ended = _wait_all(jobs)
    finally:
        for job in jobs:
            job.stop()
    output = "\n".join(job.output() for job in jobs)
    # torch's own abort at teardown, after the result was printed, is the program's result
    # all the same (as in the tests); anything else is a failure of the reference job.
    if any(codes) and not torchrun_job.torch_teardown_crash(output):
        raise RuntimeError(f"the fixed job failed ({codes}):\n{output}")
    if torchrun_job.checksums(output) != [expected]:
        raise RuntimeError(f"the fixed job's checksum is not the reference {expected}:\n{output}")
    entered = [stamp(job.workspace / f"main_{node * len(LOCAL_RANKS) + local}")
               for node, job in enumerate(jobs) for local in LOCAL_RANKS]
    return ended - max(entered)


def measure(folder: Path, expected: str) -> tuple[float, float]:
    """(rank 2's failure to all 4 sessions waiting, one resume to both agents' exit)."""
    jobs = _pods(folder, {}, BUG)
    failing = jobs[1]
    try:
        deadline = time.monotonic() + TIMEOUT
        while not all((record := job.record(local)) and record["state"] == "waiting"
                      for job in jobs for local in LOCAL_RANKS):
            exited = [job for job in jobs if job.proc.poll() is not None]
            if exited or time.monotonic() > deadline:
                output = "\n".join(job.output() for job in jobs)
                raise RuntimeError(f"not every rank waited in a session:\n{output}")
            time.sleep(0.02)
        in_sessions = time.time() - stamp(failing.workspace / "failed_at")
        torchrun_job.fix(failing.workspace / SCRIPT[0], BUG)  # the failing pod's copy only
        record = failing.record(0)  # global rank 2
        assert record is not None
        resumed = time.time()
        status, answer = torchrun_job.post(record, "/api/resume")
        if status != 202:
            raise RuntimeError(f"the resume was refused ({status}): {answer}")
        codes, ended = _wait_all(jobs)
        output = "\n".join(job.output() for job in jobs)
        if any(codes):
            raise RuntimeError(f"the resumed job failed ({codes}):\n{output}")
        if torchrun_job.checksums(output) != [expected]:
            raise RuntimeError(f"the resumed job's checksum is not the reference {expected}:"
                               f"\n{output}")
        if (jobs[0].workspace / SCRIPT[0]).read_bytes() != (
                failing.workspace / SCRIPT[0]).read_bytes():
            raise RuntimeError("the other pod's copy did not take the fix")
        return in_sessions, ended - resumed
    finally:
        for job in jobs:
            job.stop()


def run(runs: int = min(RUNS, 3)) -> list[dict[str, Any]]:
    to_sessions: list[float] = []
    resumes: list[float] = []
    baselines: list[float] = []
    with tempfile.TemporaryDirectory(prefix="podcode-bench-multipod-job-") as top:
        expected = reference(Path(top) / "reference")
        for index in range(runs):
            with tempfile.TemporaryDirectory(prefix="run-", dir=top) as folder:
                # in turn first and second, as the harness's interleaving does
                if index % 2 == 0:
                    baselines.append(baseline(Path(folder) / "fixed", expected))
                    in_sessions, resume = measure(Path(folder) / "failing", expected)
                else:
                    in_sessions, resume = measure(Path(folder) / "failing", expected)
                    baselines.append(baseline(Path(folder) / "fixed", expected))
            to_sessions.append(in_sessions)
            resumes.append(resume)
    overheads = [r - b for r, b in zip(resumes, baselines, strict=True)]
    return [
        figure("multipod_failure_to_all_sessions_s", to_sessions, unit="s", goal="<= 5",
               digits=3, pods=len(PODS), ranks=len(PODS) * len(LOCAL_RANKS),
               measures="2 pods (torchrun agents) x 2 ranks, DDP over gloo: global rank 2's "
               "exception to all 4 ranks waiting in their sessions (`PODCODE_IDE=none`)",
               baseline_is="none: an absolute goal"),
        figure("multipod_resume_overhead_s", overheads, unit="s", goal="<= 10",
               baseline=baselines, digits=3, pods=len(PODS),
               ranks=len(PODS) * len(LOCAL_RANKS),
               measures="2 pods x 2 ranks: one `POST /api/resume` on the failing pod (the fix "
               "in its copy only, carried to the other pod by the job's store) to both agents' "
               "exit with the reference checksum, less the baseline",
               baseline_is="the fixed job, podcode off, on two agents: last rank entering main "
               "to the last agent's exit",
               resume_to_result_s=round(statistics.median(resumes), 3),
               checksum=expected),
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
