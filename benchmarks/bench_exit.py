"""exit_after_task_s: from the task's end to the process's exit, after a session.

Each run starts a decorated task that fails (``ide="none"``: debugpy and the control
API, no code-server), waits until its session waits, and ends it through the control
API: ``POST /api/resume`` (the task then succeeds and the call returns,
``exit_after_task_s``) or ``POST /api/abort`` (the call raises, ``exit_after_abort_s``).
The child prints ``time.time()`` the moment the call is over; the figure is the time from
then until ``waitpid`` returns here. ``exit_after_sigterm_s`` times the preemption path
instead: SIGTERM to the waiting process, until it has exited (no ``on_preempt`` hooks).

``sigterm_exit_s`` needs no session: a decorated task runs on a worker thread (the main
thread in ``join()``, as a framework runs a sync task) and is sent SIGTERM; its
``while check_alive()`` loop ends, the task returns and prints ``time.time()``, and the
figure is the time from then until the process has exited, with status 143 (any other
status fails the run). Its baseline is the same task on the main thread, timed the same
way in the same run: the worker thread's way out (the main thread woken from ``join()``
to raise ``SystemExit``) should cost no more than the main thread's.

The baseline is a process that only calls ``debugpy.listen()`` and then ends, timed the
same way, interleaved with podcode's runs: pydevd's non-daemon alive check holds such a
process about 0.7 s at exit. Without podcode's exit hook a session's process waited
about 5 s more (pydevd's polls, slowed while the session waited).

Run: ``python benchmarks/bench_exit.py``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_async import _waiting  # noqa: E402
from benchmarks.harness import RUNS, figure, interleaved  # noqa: E402
from interactive.base.control_client import ControlClient  # noqa: E402
from interactive.base.identity import SESSION_VARIABLE  # noqa: E402

GOAL = "<= 0.5"
JOB = textwrap.dedent("""
    import time
    from interactive import vscode

    calls = [0]


    @vscode(port=0, control_port=0, debug_port=0, ide="none")
    def train(value):
        calls[0] += 1
        if calls[0] == 1:
            raise ValueError("broken")
        return value


    if __name__ == "__main__":
        try:
            train(1)
        finally:
            print("OVER", time.time(), flush=True)
""")
BARE = textwrap.dedent("""
    import time
    import debugpy

    debugpy.listen(("127.0.0.1", 0))
    print("OVER", time.time(), flush=True)
""")


def _environ(home: Path) -> dict[str, str]:
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    env.pop(SESSION_VARIABLE, None)
    return env


def _over(output: str) -> float:
    """When the child said its task was over (its wall clock, as ours)."""
    for line in output.splitlines():
        if line.startswith("OVER "):
            return float(line.split()[1])
    raise RuntimeError(f"the child never said its task was over:\n{output[-2000:]}")


def _finish(proc: subprocess.Popen[bytes], started: float | None = None) -> float:
    """Seconds from the task's end (or ``started``) until ``proc`` exited."""
    output, _ = proc.communicate(timeout=120)
    exited = time.time()
    return exited - (started if started is not None else _over(output.decode(errors="replace")))


def session_exit(way_out: str) -> float:
    """One run: a session ended by ``way_out`` (resume, abort, sigterm); its exit time."""
    root = Path(tempfile.mkdtemp(prefix="podcode-bench-exit-"))
    workspace, home = root / "ws", root / "home"
    workspace.mkdir()
    (workspace / "job.py").write_text(JOB)
    proc = subprocess.Popen([sys.executable, "job.py"], cwd=workspace, env=_environ(home),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        record = _waiting(home, proc)
        if way_out == "sigterm":
            proc.send_signal(signal.SIGTERM)
            return _finish(proc, started=time.time())
        client = ControlClient(record["control_url"], record["token"])
        if way_out == "resume":
            client.resume()
        else:
            client.abort()
        return _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


THREADED = textwrap.dedent("""
    import sys, threading, time
    import interactive
    from interactive import vscode


    @vscode(port=0, control_port=0, debug_port=0, ide="none")
    def train():
        print("RUNNING", flush=True)
        while interactive.check_alive():
            time.sleep(0.005)
        print("OVER", time.time(), flush=True)


    if __name__ == "__main__":
        if sys.argv[1] == "thread":
            worker = threading.Thread(target=train)
            worker.start()
            worker.join()
        else:
            train()
        print("the main thread went on", flush=True)
""")


def sigterm_exit(where: str) -> float:
    """One run: a task on ``where`` (thread, main) sent SIGTERM; seconds from its return
    to the process's exit, which must be with status 143."""
    root = Path(tempfile.mkdtemp(prefix="podcode-bench-sigterm-"))
    (root / "job.py").write_text(THREADED)
    proc = subprocess.Popen([sys.executable, "job.py", where], cwd=root,
                            env=_environ(root / "home"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode(errors="replace")
        if not first.startswith("RUNNING"):
            raise RuntimeError(f"the task did not start: {first}")
        proc.send_signal(signal.SIGTERM)
        took = _finish(proc)
        if proc.returncode != 143:
            raise RuntimeError(f"exited with {proc.returncode}, not 143")
        return took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def bare_exit() -> float:
    """One run of the baseline: a process that only calls ``debugpy.listen()``."""
    env = {**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    proc = subprocess.Popen([sys.executable, "-c", BARE], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return _finish(proc)


ABOUT = {
    "exit_after_task_s": "seconds from the resumed task's return to the process's exit",
    "exit_after_abort_s": "seconds from the aborted call's raise to the process's exit",
    "exit_after_sigterm_s": "seconds from SIGTERM to a waiting session's process to its exit",
    "sigterm_exit_s": "seconds from the return, after SIGTERM, of a task on a worker thread "
                      "(the main thread in join()) to the process's exit with status 143",
}
BASELINE_IS = "a process that only calls `debugpy.listen()`, from its last line to its exit"


def run(runs: int = RUNS) -> list[dict[str, Any]]:
    entries = []
    for name, way_out in (("exit_after_task_s", "resume"), ("exit_after_abort_s", "abort"),
                          ("exit_after_sigterm_s", "sigterm")):
        ours, bare = interleaved(functools.partial(session_exit, way_out), bare_exit, runs)
        entries.append(figure(name, ours, unit="s", goal=GOAL, baseline=bare, digits=3,
                              measures=ABOUT[name], baseline_is=BASELINE_IS))
    ours, main = interleaved(functools.partial(sigterm_exit, "thread"),
                             functools.partial(sigterm_exit, "main"), runs)
    entries.append(figure("sigterm_exit_s", ours, unit="s", goal=GOAL, baseline=main,
                          digits=3, measures=ABOUT["sigterm_exit_s"],
                          baseline_is="the same task on the main thread, timed the same way"))
    return entries


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
