"""The session's watchdog: decisions, and real processes killed with real signals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from interactive.base.identity import SESSION_VARIABLE, process_started
from interactive.session import watchdog
from interactive.session.watchdog import Orders, Seen
from tests.processes import marked_processes
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


def test_orders_survive_the_command_line(tmp_path: Path) -> None:
    orders = Orders(12, 1712345678.12, ("PODCODE_SESSION_ID", "12-171234567812"),
                    (tmp_path / "a.json", tmp_path / "b.json"), 0.25, 3.0)
    assert watchdog.parse_arguments(watchdog.arguments(orders, 7)) == (orders, 7)
    unknown_start = Orders(12, None, ("X", "y=z"), ())
    assert watchdog.parse_arguments(watchdog.arguments(unknown_start, 7))[0] == unknown_start


def test_victims_carry_the_marker_and_belong_to_the_user() -> None:
    marker = ("PODCODE_SESSION_ID", "12-34")
    seen = [
        Seen(10, 1000, {"PODCODE_SESSION_ID": "12-34"}),  # code-server
        Seen(11, 1000, {"PODCODE_SESSION_ID": "12-34", "TERM": "xterm"}),  # a terminal
        Seen(12, 1000, {"PODCODE_SESSION_ID": "99-1"}),  # another session's
        Seen(13, 1000, {}),  # unmarked
        Seen(14, 0, {"PODCODE_SESSION_ID": "12-34"}),  # another user's
        Seen(15, 1000, None),  # unreadable
        Seen(16, 1000, {"PODCODE_SESSION_ID": "12-34"}),  # the watchdog itself
    ]
    assert watchdog.victims(seen, marker, 1000, {16}) == [10, 11]


def test_the_companion_file_goes_only_with_its_own_token() -> None:
    assert watchdog.companion_to_remove({"token": "a"}, {"token": "a"})
    assert not watchdog.companion_to_remove({"token": "a"}, {"token": "b"})
    assert not watchdog.companion_to_remove({"token": None}, {"token": None})


def test_a_reused_pid_or_a_zombie_is_not_the_task() -> None:
    me = os.getpid()
    assert watchdog.alive(me, process_started(me))
    assert not watchdog.alive(me, 1.0)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = process_started(child.pid)
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    assert not watchdog.alive(child.pid, started)
    child.wait()
    assert not watchdog.alive(child.pid, started)


def test_waiting_ends_on_stop_or_on_death() -> None:
    me = os.getpid()
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, watchdog.STOP)
        assert watchdog.wait_for_end(Orders(me, process_started(me), ("X", "y"), ()),
                                     read_fd) == "stop"
    finally:
        os.close(read_fd)
        os.close(write_fd)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    read_fd, write_fd = os.pipe()
    os.close(write_fd)  # a closed pipe is no stop order: the pid decides
    try:
        orders = Orders(child.pid, process_started(child.pid), ("X", "y"), (), 0.05)
        assert watchdog.wait_for_end(orders, read_fd) == "died"
        assert child.poll() is not None or not watchdog.alive(child.pid, orders.started)
    finally:
        os.close(read_fd)
        child.wait()


TASK = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from pathlib import Path
    from interactive.base import record
    from interactive.base.identity import SESSION_VARIABLE, own_session_id, process_identity
    from interactive.session.watchdog import start_watchdog

    home, workspace, how = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    paths = record.record_paths(home, home)
    data = {"state": "waiting", "task": "t", "token": "tok-1", "password": "pw-1",
            "workspace": str(workspace), **process_identity()}
    for path in paths:
        record.write_session(path.parent, data)
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / ".vscode" / "podcode-session.json").write_text(json.dumps({"token": "tok-1"}))
    (workspace / ".vscode" / "podcode").mkdir()
    own = workspace / ".vscode" / "podcode" / f"session-{own_session_id()}.json"
    own.write_text(json.dumps({"token": "tok-1"}))
    other = workspace / ".vscode" / "podcode" / "session-1-2.json"
    other.write_text(json.dumps({"token": "another session's"}))
    env = {**os.environ, SESSION_VARIABLE: own_session_id()}
    grandchild = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \\
                 "'import time; time.sleep(600)']); time.sleep(600)"
    # like a terminal of code-server: a session of its own, with a child of its own
    subprocess.Popen([sys.executable, "-c", grandchild], env=env, start_new_session=True)
    dog = start_watchdog(paths, poll_seconds=0.2, grace_seconds=1.0)
    print(own_session_id(), dog.pid, flush=True)
    if how == "guard":
        import asyncio, threading
        threading.Thread(target=asyncio.run, args=(dog.guard(0.1),), daemon=True).start()
    if how == "stop":
        sys.stdin.readline()
        dog.stop()
        print("stopped", dog.proc.returncode, flush=True)
    sys.stdin.readline()
""")




class Task:
    def __init__(self, tmp_path: Path, how: str) -> None:
        self.home, self.workspace = tmp_path / "home", tmp_path / "workspace"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop(SESSION_VARIABLE, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TASK, str(self.home), str(self.workspace), how],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.session, dog = self.proc.stdout.readline().split()
        self.dog = int(dog)

    def tell(self) -> str:
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def wait_marked(self, count: int) -> list[psutil.Process]:
        deadline = time.monotonic() + 30
        while len(found := marked_processes(self.session)) != count and time.monotonic() < deadline:
            time.sleep(0.05)
        return found

    def records(self) -> list[dict[str, object]]:
        folder = self.home / "sessions" / self.session
        return [json.loads(p.read_text()) for p in (folder / "session.json",
                                                      self.home / "session.json")]


@pytest.fixture
def task(tmp_path: Path) -> Iterator[Callable[[str], Task]]:
    made: list[Task] = []

    def make(how: str) -> Task:
        made.append(Task(tmp_path, how))
        return made[-1]

    yield make
    for one in made:
        for proc in marked_processes(one.session):
            proc.kill()
        if one.proc.poll() is None:
            one.proc.kill()
        one.proc.communicate(timeout=10)


def test_sigkill_of_the_task_ends_its_whole_tree_and_clears_its_secrets(
    task: Callable[[str], Task],
) -> None:
    running = task("kill")
    assert len(running.wait_marked(2)) == 2  # the "terminal" and its child
    running.proc.send_signal(signal.SIGKILL)
    running.proc.wait(10)
    assert running.wait_marked(0) == []
    psutil.wait_procs([psutil.Process(running.dog)], timeout=30)
    assert not psutil.pid_exists(running.dog) or (
        psutil.Process(running.dog).status() == psutil.STATUS_ZOMBIE)
    for data in running.records():
        assert data["token"] is None and data["password"] is None
        assert data["state"] == "waiting" and isinstance(data["process_gone_at"], float)
    assert not (running.workspace / ".vscode" / "podcode-session.json").exists()
    left = sorted(p.name for p in (running.workspace / ".vscode" / "podcode").iterdir())
    assert left == ["session-1-2.json"]  # its own companion file (its token) gone


def watchdogs_of(pid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = proc.info["cmdline"] or []
        if "interactive.session.watchdog" in line and str(pid) in line:
            found.append(proc)
    return found


def test_a_killed_watchdog_is_replaced_and_the_next_one_still_cleans_up(
    task: Callable[[str], Task],
) -> None:
    """Killed first, the watchdog would leave code-server orphaned when the task dies
    next: the session starts another at once."""
    running = task("guard")
    assert len(running.wait_marked(2)) == 2
    os.kill(running.dog, signal.SIGKILL)
    wait_until(lambda: [p for p in watchdogs_of(running.proc.pid) if p.pid != running.dog],
               "a new watchdog", timeout=30)
    running.proc.send_signal(signal.SIGKILL)
    running.proc.wait(10)
    assert running.wait_marked(0) == []
    wait_until(lambda: all(data["token"] is None for data in running.records()),
               "the secrets cleared", timeout=30)


def test_a_clean_close_stops_the_watchdog_and_ends_nothing(task: Callable[[str], Task]) -> None:
    running = task("stop")
    assert len(running.wait_marked(2)) == 2
    assert running.tell() == "stopped 0"
    assert not psutil.pid_exists(running.dog)
    running.proc.send_signal(signal.SIGKILL)
    running.proc.wait(10)
    time.sleep(1.0)  # what a watchdog would have done by now, it did not do
    assert len(marked_processes(running.session)) == 2
    assert all(data["token"] == "tok-1" for data in running.records())


def test_a_watchdog_that_cannot_start_does_not_stop_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    assert watchdog.start_watchdog([tmp_path / "session.json"]) is None
    assert "no watchdog for this session" in caplog.text


def test_the_guard_is_woken_by_the_watchdogs_end_not_by_a_clock() -> None:
    """Waiting on a live process wakes nothing (an hour's poll), and its end wakes it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    async def scenario() -> bool:
        waiting = asyncio.ensure_future(watchdog.until_ended(proc.pid, 3600))
        await asyncio.sleep(0.2)
        still = not waiting.done()
        proc.kill()
        await asyncio.wait_for(waiting, 30)
        return still

    try:
        assert asyncio.run(scenario())
    finally:
        proc.kill()
        proc.wait(10)


def test_without_a_process_to_watch_the_guard_waits_its_poll() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)  # reaped: no pidfd can be had for it
    asyncio.run(asyncio.wait_for(watchdog.until_ended(gone.pid, 0.01), 30))
