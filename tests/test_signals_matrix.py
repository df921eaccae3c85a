"""SIGTERM on every thread a decorated task can run on: real processes, a real signal.

One small program runs its decorated task on the main thread, on a worker thread (the
main thread in ``join()``), as an asyncio task on the main thread's loop, or on a loop in
another thread. It is sent SIGTERM while the task runs towards a success, while it runs
towards a failure, while its debug session waits, or once no call is in flight. While a
call is in flight the process must exit with 143 (never 0), ``on_preempt`` must have run
and buffered output must be out; with none in flight, SIGTERM must do what it does
without podcode (the same program with ``PODCODE_ENABLE=0``). How fast it exits is
timed by benchmarks/bench_exit.py, not here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interactive.base.identity import SESSION_VARIABLE

WAIT_SECONDS = 60.0

PROGRAM = textwrap.dedent("""
    import asyncio, sys, threading, time
    from pathlib import Path
    import interactive
    from interactive import vscode

    KIND, STATE = sys.argv[1], sys.argv[2]
    SETTINGS = dict(ide="none", port=0, control_port=0, debug_port=0)


    def on_preempt():
        Path("preempted").touch()
        print("on_preempt ran")  # no flush: podcode's way out must flush it


    def started():
        print("task started")  # no flush either
        if STATE == "session":
            raise ValueError("broken at once: a session opens")
        Path("running").touch()


    def finished():
        if STATE == "fail":
            raise ValueError("failing after SIGTERM")
        return "value"


    @vscode(on_preempt=on_preempt, **SETTINGS)
    def task():
        started()
        while STATE != "idle" and interactive.check_alive():
            time.sleep(0.01)
        return finished()


    @vscode(on_preempt=on_preempt, **SETTINGS)
    async def atask():
        started()
        while STATE != "idle" and interactive.check_alive():
            await asyncio.sleep(0.01)
        return finished()


    def body():
        task()
        if STATE == "idle":  # no call in flight from here on
            Path("idle").touch()
            time.sleep(60)


    async def abody():
        await atask()
        if STATE == "idle":
            Path("idle").touch()
            await asyncio.sleep(60)


    def in_thread(target, *args):
        worker = threading.Thread(target=target, args=args)
        worker.start()
        worker.join()


    if KIND == "main":
        body()
    elif KIND == "thread":
        in_thread(body)
    elif KIND == "asyncio":
        asyncio.run(abody())
    else:
        in_thread(asyncio.run, abody())
    print("the program went on", flush=True)
""")

KINDS = ["main", "thread", "asyncio", "loop_thread"]


@pytest.fixture
def run_program(
    tmp_path: Path, podcode_home: Path
) -> Iterator[Callable[[str, str, str], tuple[int, str, Path]]]:
    """``run(kind, state, enable)``: start the program, wait until it is in ``state``,
    send SIGTERM; its status, its output and its folder."""
    started: list[subprocess.Popen[str]] = []

    def run(kind: str, state: str, enable: str = "1") -> tuple[int, str, Path]:
        folder = tmp_path / f"{kind}-{state}-{enable}"
        folder.mkdir()
        (folder / "job.py").write_text(PROGRAM)
        env = {name: value for name, value in os.environ.items()
               if name not in ("PYTHONUNBUFFERED", SESSION_VARIABLE)}
        env.update(PODCODE_ENABLE=enable, PODCODE_IDE="none",
                   PODCODE_HOME=str(podcode_home / folder.name),
                   PYDEVD_DISABLE_FILE_VALIDATION="1")
        child = subprocess.Popen([sys.executable, "job.py", kind, state], cwd=folder, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(child)
        _wait_for(child, _ready(state, folder, podcode_home / folder.name))
        child.send_signal(signal.SIGTERM)
        output, _ = child.communicate(timeout=WAIT_SECONDS)
        return child.returncode, output, folder

    yield run
    for child in started:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=30)


def _ready(state: str, folder: Path, home: Path) -> Callable[[], bool]:
    if state == "session":
        return lambda: _session_waits(home)
    mark = folder / ("idle" if state == "idle" else "running")
    return mark.exists


def _session_waits(home: Path) -> bool:
    try:
        record = json.loads((home / "session.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(record.get("state") == "waiting")


def _wait_for(child: subprocess.Popen[str], ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not ready():
        if child.poll() is not None:
            output, _ = child.communicate()
            pytest.fail(f"the program ended ({child.returncode}) before it was ready:\n{output}")
        if time.monotonic() > deadline:
            pytest.fail("the program never became ready")
        time.sleep(0.02)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("state", ["succeed", "fail", "session"])
def test_sigterm_during_a_call_runs_on_preempt_flushes_and_exits_143(
    run_program: Callable[[str, str, str], tuple[int, str, Path]], kind: str, state: str
) -> None:
    status, output, folder = run_program(kind, state, "1")
    assert status == 143, output
    assert (folder / "preempted").exists(), output
    assert "task started" in output and "on_preempt ran" in output, output  # flushed
    assert "exiting with status 143" in output
    assert "the program went on" not in output, output  # nor did the main thread


@pytest.mark.parametrize("kind", KINDS)
def test_sigterm_with_no_call_in_flight_does_what_it_does_without_podcode(
    run_program: Callable[[str, str, str], tuple[int, str, Path]], kind: str
) -> None:
    without, output_without, _ = run_program(kind, "idle", "0")
    status, output, folder = run_program(kind, "idle", "1")
    assert status == without == -signal.SIGTERM, (output, output_without)
    assert not (folder / "preempted").exists(), output
    # killed at once by the signal, as without podcode: what was buffered is lost alike
    assert ("task started" in output) is ("task started" in output_without), output
