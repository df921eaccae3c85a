"""After its sessions, a process ends at once: podcode ends pydevd's threads itself, on
every way out, and a later session of the same process still works.

pydevd's alive check is a non-daemon thread that the interpreter joins at exit; left to
itself it notices the end of the program only at its next poll (5 s while a session had
slowed it) and then polls its other threads for up to 0.5 s. These tests never time the
exit (benchmarks/bench_exit.py does): they check who ended pydevd's threads, and a hang
fails them through ``wait_exit``'s timeout.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.dap import DapClient
from tests.session_fixture import Job

REPORT = """
import atexit, json, threading


def _watch_pydevd_end():
    # Who ends pydevd's threads, and how: podcode's exit hook on the main thread, before
    # the interpreter joins the alive check, or that thread itself after its poll.
    import pydevd

    debugger = pydevd.get_global_debugger()
    calls = []
    dispose = debugger.dispose_and_kill_all_pydevd_threads

    def recorded(*args, **kwargs):
        calls.append((threading.current_thread().name, kwargs.get("timeout")))
        return dispose(*args, **kwargs)

    debugger.dispose_and_kill_all_pydevd_threads = recorded
    atexit.register(lambda: print("PYDEVD ENDED BY", json.dumps(calls[:1]), flush=True))
"""

JOB = REPORT + """
import interactive
from interactive import vscode

calls = [0]


@vscode(port=0, control_port=0, debug_port=0, ide="none", {settings})
def train(value):
    calls[0] += 1
    if calls[0] == 1:
        raise ValueError("broken")
    return value * 2


if __name__ == "__main__":
    try:
        print("RESULT", train(21), flush=True)
    except interactive.Reaped:
        print("REAPED", flush=True)
        raise
    finally:
        _watch_pydevd_end()
"""
REAP_SETTINGS = "max_idle_seconds=1, grace_seconds=1, poll_seconds=0.2"


def _ended_by(output: str) -> list[Any]:
    line = next(line for line in output.splitlines() if line.startswith("PYDEVD ENDED BY"))
    ended: list[Any] = json.loads(line.removeprefix("PYDEVD ENDED BY "))
    return ended


@pytest.mark.parametrize(
    ("way_out", "status"),
    [("resume", 0), ("abort", 1), ("sigterm", 143),
     pytest.param("reaped", 1, marks=pytest.mark.slow)],
)
def test_podcode_ends_pydevd_at_exit_on_every_way_out(
    job: Job, way_out: str, status: int
) -> None:
    job.write("job.py", JOB.format(settings=REAP_SETTINGS if way_out == "reaped" else ""))
    job.start().wait_state("waiting")
    assert job.proc is not None
    if way_out == "sigterm":
        job.proc.send_signal(signal.SIGTERM)
    elif way_out in ("resume", "abort"):
        assert job.api("POST", f"/api/{way_out}")[0] == 202
    assert job.wait_exit(timeout=60) == status, job.output()
    output = job.output()
    assert ("RESULT 42" in output) is (way_out == "resume"), output
    assert ("REAPED" in output) is (way_out == "reaped"), output
    assert _ended_by(output) == [["MainThread", 0]], output


TWO_SESSIONS = REPORT + """
from interactive import vscode


@vscode(port=0, control_port=0, debug_port=0, ide="none")
def first(value):
    raise ValueError(f"first {value}")


@vscode(port=0, control_port=0, debug_port=0, ide="none")
def second(value):
    raise KeyError(f"second {value}")


if __name__ == "__main__":
    try:
        first(1)
    except ValueError:
        print("FIRST OVER", flush=True)
    try:
        second(2)
    except KeyError:
        print("SECOND OVER", flush=True)
    _watch_pydevd_end()
"""


def _waiting(home: Path, task: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in (home / "sessions").glob("*/session.json"):
            try:
                record: dict[str, Any] = json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                continue  # being replaced
            if record.get("state") == "waiting" and record.get("task", "").endswith(task):
                return record
        time.sleep(0.05)
    raise AssertionError(f"no waiting session for {task}")


def _abort(record: dict[str, Any]) -> None:
    import urllib.request

    request = urllib.request.Request(record["control_url"] + "/api/abort", data=b"{}",
                                     method="POST")
    request.add_header("Authorization", f"Bearer {record['token']}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 202


def test_a_later_session_of_the_process_still_debugs_then_the_process_ends(job: Job) -> None:
    """The first session's end wakes pydevd and gives it back its pace; the second
    session of the same process still stops a debugger in its own failed frame."""
    job.write("job.py", TWO_SESSIONS)
    job.start()
    for task, error in (("first", "first 1"), ("second", "'second 2'")):
        record = _waiting(job.home, task)
        client = DapClient(record["debug"]["host"], record["debug"]["port"])
        try:
            stopped = client.attach_and_stop()
            assert stopped["description"] == error
            threads = client.request("threads")["threads"]
            assert [t["name"] for t in threads] == [task]
        finally:
            client.close()
        _abort(record)
    assert job.wait_exit(timeout=60) == 0, job.output()
    output = job.output()
    assert "FIRST OVER" in output and "SECOND OVER" in output
    assert _ended_by(output) == [["MainThread", 0]], output


OUTLIVED = REPORT + """
import concurrent.futures, threading
from interactive import vscode


@vscode(port=0, control_port=0, debug_port=0, ide="none")
def train(value):
    raise ValueError("broken")


if __name__ == "__main__":
    pool = concurrent.futures.ThreadPoolExecutor(1)  # never shut down: joined at exit
    pool.submit(int).result()
    after = threading.Thread(target=threading.main_thread().join, name="after-main")
    after.start()  # not a daemon: runs on after the main thread is done
    try:
        train(1)
    except ValueError:
        print("ABORTED", flush=True)
    _watch_pydevd_end()
"""


def test_threads_that_outlive_the_main_one_are_debugged_to_their_end(job: Job) -> None:
    """Non-daemon threads still run when the main thread ends: pydevd's threads are ended
    once they are done, by podcode, not at pydevd's own pace."""
    job.write("job.py", OUTLIVED)
    job.start().wait_state("waiting")
    assert job.api("POST", "/api/abort")[0] == 202
    assert job.wait_exit(timeout=60) == 0, job.output()
    assert "ABORTED" in job.output()
    assert _ended_by(job.output()) == [["podcode-pydevd-exit", 0]], job.output()


IN_A_THREAD = REPORT + """
import threading
from interactive import vscode


@vscode(port=0, control_port=0, debug_port=0, ide="none")
def train(value):
    raise ValueError("broken")


if __name__ == "__main__":
    worker = threading.Thread(target=train, args=(1,))  # as a framework runs a sync task
    worker.start()
    try:
        worker.join()
        print("THE MAIN THREAD WENT ON", flush=True)
    finally:
        print("MAIN FINALLY", flush=True)
        _watch_pydevd_end()
"""


def test_sigterm_to_a_session_waiting_in_a_thread_exits_143_through_the_main_thread(
    job: Job,
) -> None:
    """The session closes on its thread; the main thread, woken from ``join()``, raises
    ``SystemExit``: its ``finally`` blocks and ``atexit`` callbacks run, pydevd is ended
    by podcode's exit hook there, and the status is 143."""
    job.write("job.py", IN_A_THREAD)
    job.start().wait_state("waiting")
    assert job.proc is not None
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait_exit(timeout=60) == 143, job.output()
    output = job.output()
    assert "MAIN FINALLY" in output and "THE MAIN THREAD WENT ON" not in output, output
    assert _ended_by(output) == [["MainThread", 0]], output
