"""Activity samplers against real files and real processes (GPUs: test_gpu.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from interactive.base.threads import start_thread
from interactive.reaper.activity import CpuSampler, FileSampler, own_writes
from tests.waiting import wait_until

BURN = "import time\nwhile time.process_time() < {seconds}: pass\n"
FOREVER = "while True: pass\n"


def bump(path: Path) -> None:
    """Change a file's modification time for sure, whatever the clock's resolution."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


# -- files -----------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    for skipped in (".git", "node_modules", "__pycache__"):
        (root / skipped).mkdir()
        (root / skipped / "f").write_text("x")
    return root


def test_first_scan_is_a_baseline(workspace: Path) -> None:
    sampler = FileSampler(workspace)
    first = sampler.sample(0.0)
    assert not first.active
    assert first.value == 2.0
    assert not sampler.sample(1.0).active


@pytest.mark.parametrize("change", ["modify", "add", "delete", "rename"])
def test_changes_in_the_workspace_are_activity(workspace: Path, change: str) -> None:
    sampler = FileSampler(workspace)
    sampler.sample(0.0)
    target = workspace / "pkg" / "model.py"
    if change == "modify":
        bump(target)
    elif change == "add":
        (workspace / "pkg" / "new.py").write_text("")
    elif change == "delete":
        target.unlink()
    else:
        target.rename(workspace / "pkg" / "model2.py")
    assert sampler.sample(1.0).active
    assert not sampler.sample(2.0).active


def test_tool_folders_are_not_watched(workspace: Path) -> None:
    sampler = FileSampler(workspace)
    sampler.sample(0.0)
    for skipped in (".git", "node_modules", "__pycache__"):
        bump(workspace / skipped / "f")
        (workspace / skipped / "g").write_text("y")
    assert not sampler.sample(1.0).active


def test_symlinked_folders_are_not_followed(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.bin").write_text("1")
    (workspace / "data").symlink_to(outside, target_is_directory=True)
    sampler = FileSampler(workspace)
    sampler.sample(0.0)
    bump(outside / "data.bin")
    assert not sampler.sample(1.0).active


def test_large_trees_are_bounded(workspace: Path, caplog: pytest.LogCaptureFixture) -> None:
    for index in range(10):
        (workspace / f"f{index}.txt").write_text("x")
    sampler = FileSampler(workspace, max_files=5)
    caplog.set_level(logging.WARNING, logger="interactive.reaper.activity")
    assert sampler.sample(0.0).value == 5.0
    assert sampler.sample(1.0).value == 5.0
    assert len([r for r in caplog.records if "only the first 5" in r.getMessage()]) == 1


@pytest.mark.parametrize("excluded", [True, False])
def test_excluded_files_and_folders_are_not_activity(workspace: Path, excluded: bool) -> None:
    log_file, state = workspace / "run.log", workspace / "state"
    log_file.write_text("start\n")
    state.mkdir()
    sampler = FileSampler(workspace, exclude=lambda: [log_file, state] if excluded else [])
    sampler.sample(0.0)
    with log_file.open("a") as handle:
        handle.write("INFO interactive.reaper.monitor: activity: none\n")
    (state / "heartbeat").write_text("")
    assert sampler.sample(1.0).active is not excluded
    bump(workspace / "train.py")  # the user's edit still counts
    assert sampler.sample(2.0).active


def test_podcode_files_in_vscode_are_not_activity(workspace: Path) -> None:
    (workspace / ".vscode" / "podcode").mkdir(parents=True)
    sampler = FileSampler(workspace, exclude=list)
    sampler.sample(0.0)
    (workspace / ".vscode" / "podcode-session.json").write_text("{}")
    (workspace / ".vscode" / "podcode" / "debug_again.py").write_text("")
    assert not sampler.sample(1.0).active
    (workspace / ".vscode" / "launch.json").write_text("{}")
    assert sampler.sample(2.0).active


def test_own_writes_names_logging_files_home_and_code_servers_data(tmp_path: Path) -> None:
    handler = logging.FileHandler(tmp_path / "podcode.log", delay=True)
    logger = logging.getLogger("tests.activity.own-writes")
    logger.addHandler(handler)
    try:
        found = own_writes({"PODCODE_HOME": str(tmp_path / "h"), "HOME": str(tmp_path / "u")})
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert tmp_path / "podcode.log" in found
    assert tmp_path / "h" in found
    assert tmp_path / "u" / ".local" / "share" / "code-server" in found
    xdg = own_writes({"XDG_DATA_HOME": str(tmp_path / "data")})
    assert tmp_path / "data" / "code-server" in xdg


OWN_LOG = """
import logging, os, sys, time
from pathlib import Path
from interactive.reaper.activity import FileSampler

workspace = Path(sys.argv[1])
sampler = FileSampler(workspace)
sampler.sample(0.0)
for _ in range(3):
    logging.getLogger("interactive.reaper.monitor").warning("idle monitor: still waiting")
    print("a print of the waiting task", flush=True)
    time.sleep(0.02)
quiet = sampler.sample(1.0).active
stat = (workspace / "train.py").stat()
os.utime(workspace / "train.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
edited = sampler.sample(2.0).active
os.write(int(sys.argv[2]), f"{quiet} {edited}".encode())
"""


def test_podcode_writing_its_log_into_the_workspace_is_not_activity(workspace: Path) -> None:
    """``python job.py > run.log 2>&1`` in the workspace: a real process, real descriptors."""
    read, write = os.pipe()
    with open(workspace / "run.log", "w") as log_file:
        child = subprocess.Popen(
            [sys.executable, "-c", OWN_LOG, str(workspace), str(write)], stdout=log_file,
            stderr=subprocess.STDOUT, pass_fds=(write,),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    os.close(write)
    with os.fdopen(read) as answer:
        result = answer.read()
    assert child.wait(60) == 0, (workspace / "run.log").read_text()
    assert "still waiting" in (workspace / "run.log").read_text()  # the log did grow
    assert result == "False True"  # its own log is not activity; an edit is


@pytest.mark.codeserver
async def test_code_servers_heartbeat_in_the_workspace_is_not_activity(
    code_server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """The workspace is the home folder: code-server's heartbeat file lands inside it."""
    home = tmp_path / "workspace"  # the factory's workspace
    home.mkdir(exist_ok=True)
    (home / "train.py").write_text("x = 1\n")
    environ = {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share")}
    server = code_server_factory(env=environ)
    await server.start()
    heartbeat = home / ".local" / "share" / "code-server" / "heartbeat"
    watched = FileSampler(home, exclude=lambda: own_writes(environ))
    naive = FileSampler(home, exclude=list)
    watched.sample(0.0)
    naive.sample(0.0)
    before = heartbeat.stat().st_mtime_ns if heartbeat.exists() else None
    async with aiohttp.ClientSession() as client, client.get(f"{server.url}login") as page:
        assert page.status == 200  # any request but /healthz beats the heart
    wait_until(lambda: heartbeat.exists() and heartbeat.stat().st_mtime_ns != before,
               timeout=30, poll=0.02)
    assert naive.sample(1.0).active  # the heartbeat did change in the workspace
    assert not watched.sample(1.0).active


# -- CPU -------------------------------------------------------------------------


def spawn(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        for child in _children(proc.pid):
            child.kill()
        proc.kill()
        proc.wait(timeout=10)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def cpu_of(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def test_scope_is_checked() -> None:
    with pytest.raises(ValueError, match="scope"):
        CpuSampler(5.0, scope="everyone")


def test_quiet_processes_are_idle() -> None:
    sampler = CpuSampler(5.0, scope="tree")
    assert not sampler.sample(0.0).active  # baseline
    sample = sampler.sample(1000.0)
    assert not sample.active
    assert sample.value is not None and sample.value < 5.0


def test_a_busy_child_process_is_activity(processes: list[subprocess.Popen[bytes]]) -> None:
    sampler = CpuSampler(5.0, scope="tree", rescan_seconds=0)
    sampler.sample(0.0)
    proc = spawn(FOREVER)
    processes.append(proc)
    wait_until(lambda: cpu_of(proc.pid) >= 0.3, timeout=30, poll=0.02)
    sample = sampler.sample(1.0)  # >= 0.3 CPU seconds in one second: >= 30 %
    assert sample.active
    assert sample.value is not None and sample.value >= 30.0


def test_a_new_child_is_found_at_the_next_whole_reading_with_all_its_cpu(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Between whole readings of the process table (once a minute while processes start)
    only the known tree is read: a new child is found late, and counted from its start."""
    sampler = CpuSampler(0.4, scope="tree")
    sampler.sample(0.0)
    proc = spawn(FOREVER)
    processes.append(proc)
    wait_until(lambda: cpu_of(proc.pid) >= 0.3, timeout=30, poll=0.02)
    assert proc.pid not in {key[1] for key in sampler.measure(10.0) if key[0] == "proc"}
    found = sampler.sample(60.0)
    assert found.active  # >= 0.3 CPU seconds over 60 s: >= 0.5 %
    assert found.value is not None and found.value >= 0.5


def test_a_child_that_ran_and_ended_between_samples_counts() -> None:
    sampler = CpuSampler(5.0, scope="tree")
    sampler.sample(0.0)
    subprocess.run([sys.executable, "-c", BURN.format(seconds=0.3)], check=True)
    assert sampler.sample(1.0).active


def test_same_user_scope_sees_our_children(processes: list[subprocess.Popen[bytes]]) -> None:
    sampler = CpuSampler(5.0, scope="user")
    sampler.sample(0.0)
    proc = spawn(FOREVER)
    processes.append(proc)
    wait_until(lambda: cpu_of(proc.pid) >= 0.3, timeout=30, poll=0.02)
    assert sampler.sample(1.0).active


def _burn_in_thread(name: str, stop: threading.Event, ours: bool) -> threading.Thread:
    def burn() -> None:
        while not stop.is_set():
            pass

    if ours:
        return start_thread(burn, name)
    thread = threading.Thread(target=burn, name=name, daemon=True)
    thread.start()
    return thread


def _thread_cpu(native_id: int) -> float:
    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return float(thread.user_time + thread.system_time)
    return 0.0


@pytest.mark.parametrize(
    ("name", "ours", "counts"),
    [
        ("user-work", False, True),
        ("podcode-monitor", False, True),  # the name alone does not make it podcode's
        ("user-work", True, False),  # started by podcode: known whatever its name
        ("pydevd.Reader", False, False),
    ],
)
def test_threads_of_this_process(name: str, ours: bool, counts: bool) -> None:
    sampler = CpuSampler(5.0, scope="tree")
    stop = threading.Event()
    sampler.sample(0.0)
    thread = _burn_in_thread(name, stop, ours)
    try:
        assert thread.native_id is not None
        native_id = thread.native_id
        wait_until(lambda: _thread_cpu(native_id) >= 0.5, timeout=30, poll=0.02)
        sample = sampler.sample(2.0)  # counted, 0.5 CPU seconds in 2 s would be 25 %
    finally:
        stop.set()
        thread.join()
    assert sample.active is counts


IDE = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", {own!r}]),
        subprocess.Popen(["/bin/sh", "-c", {other!r}])]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(("busy", "counts"), [("own", False), ("terminal", True)])
def test_ide_processes_are_excluded_but_what_runs_in_its_terminal_counts(
    processes: list[subprocess.Popen[bytes]], busy: str, counts: bool
) -> None:
    """code-server's own processes share its executable; a shell in its terminal does not."""
    own = FOREVER if busy == "own" else "import time; time.sleep(600)"
    other = "while :; do :; done" if busy == "terminal" else "sleep 600"
    root = subprocess.Popen([sys.executable, "-c", IDE.format(own=own, other=other)],
                            stdout=subprocess.PIPE)
    processes.append(root)
    assert root.stdout is not None
    own_pid, shell_pid = map(int, root.stdout.readline().split())
    root.stdout.close()
    # the IDE reports its whole tree: launcher, its own helpers, the terminal's shell
    sampler = CpuSampler(5.0, ide_pids=lambda: [root.pid, own_pid, shell_pid], scope="tree")
    sampler.sample(0.0)
    wait_until(lambda: cpu_of(own_pid if busy == "own" else shell_pid) >= 0.5,
               timeout=30, poll=0.02)
    assert sampler.sample(2.0).active is counts  # counted, it would be >= 25 %
