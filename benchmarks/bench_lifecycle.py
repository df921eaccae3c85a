"""orphans_after_sigkill: processes of a session still running after its task was killed.

Each run starts a failing decorated task with a real code-server, waits for its
session, starts a stand-in for a code-server terminal (a process in a session
of its own, with code-server's environment, as VS Code's terminals are), then
SIGKILLs the task, as the OOM killer does, and counts the session's processes
(those carrying its marker) still running ``SETTLE_SECONDS`` later. The
baseline is how many were running just before the kill: what would be left
without the watchdog. Also reported: seconds from the kill until none was left.

Run: ``python benchmarks/bench_lifecycle.py`` (needs code-server).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interactive.base.identity import SESSION_VARIABLE, session_id  # noqa: E402
from server_bootstrap.config import CodeServerConfig  # noqa: E402
from server_bootstrap.locate import ensure_code_server  # noqa: E402
from tests.processes import marked_processes  # noqa: E402

RUNS = 5
SETTLE_SECONDS = 5.0
JOB = textwrap.dedent("""
    from interactive import vscode

    @vscode(port=0, control_port=0, debug_port=0)
    def task():
        raise RuntimeError("broken")

    if __name__ == "__main__":
        task()
""")




def _wait_waiting(home: Path, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            record: dict[str, Any] = json.loads((home / "session.json").read_text())
        except (FileNotFoundError, ValueError):
            record = {}
        if record.get("state") == "waiting" and record.get("code_server_url"):
            return record
        if proc.poll() is not None:
            raise RuntimeError("the job exited before its session opened")
        time.sleep(0.02)
    raise RuntimeError("the session did not open in time")


def one_run(root: Path, binary: Path) -> tuple[int, int, float | None]:
    """(processes before the kill, processes left after the settle time, seconds to none)."""
    workspace, home = root / "ws", root / "home"
    workspace.mkdir()
    (workspace / "job.py").write_text(JOB)
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "PODCODE_CODE_SERVER_PATH": str(binary)}
    env.pop(SESSION_VARIABLE, None)
    proc = subprocess.Popen([sys.executable, "job.py"], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    terminal: subprocess.Popen[bytes] | None = None
    session = ""
    try:
        record = _wait_waiting(home, proc)
        session = session_id(record["pid"], record["started"])
        tree = marked_processes(session)
        terminal = subprocess.Popen(["sleep", "600"], env=tree[0].environ(),
                                    start_new_session=True)
        before = len(tree) + 1
        proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(30)
        cleared = None
        while time.monotonic() - killed < SETTLE_SECONDS:
            terminal.poll()  # reap our own child once it is ended
            if cleared is None and not marked_processes(session):
                cleared = time.monotonic() - killed
            time.sleep(0.02)
        terminal.poll()
        return before, len(marked_processes(session)), cleared
    finally:
        for left in marked_processes(session) if session else []:
            left.kill()  # what the watchdog missed: not left behind by the benchmark
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if terminal is not None and terminal.poll() is None:
            terminal.kill()
            terminal.wait(30)


def run(runs: int = RUNS) -> list[dict[str, Any]]:
    binary = ensure_code_server(CodeServerConfig.from_environ())
    before, after, cleared = [], [], []
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="podcode-bench-lifecycle-"))
        try:
            alive, left, seconds = one_run(root, binary)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        before.append(alive)
        after.append(left)
        if seconds is not None:
            cleared.append(seconds)
    entries: list[dict[str, Any]] = [{
        "name": "orphans_after_sigkill", "value": statistics.median(after), "unit": "processes",
        "min": min(after), "max": max(after), "runs": runs,
        "baseline": statistics.median(before), "goal": 0,
    }]
    if cleared:
        entries.append({
            "name": "orphans_cleared_seconds", "value": round(statistics.median(cleared), 2),
            "unit": "s", "min": round(min(cleared), 2), "max": round(max(cleared), 2),
            "runs": len(cleared), "baseline": None, "goal": f"<= {SETTLE_SECONDS:g}",
        })
    return entries


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
