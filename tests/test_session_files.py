"""No token of a dead session is left in the workspace (issue 34): after ``kill -9`` of a
session's process whose watchdog did not clean up either, the next session to write the
workspace's ``.vscode`` removes the dead session's companion file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from interactive.base.identity import own_session_id, process_started, session_id
from interactive.base.types import TaskRef
from interactive.doors import vscode_files
from interactive.doors.vscode_files import (
    HOST,
    prune_dead_sessions,
    restore_workspace,
    write_configurations,
)

TASK = TaskRef("jobs.train.fit", "jobs.train", "fit", "/src/jobs/train.py")


def killed_session() -> str:
    """The session id of a real process, killed with SIGKILL (and reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started = None
    while started is None:
        started = process_started(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    return session_id(child.pid, started)


def companion(folder: Path, session: str, token: str, host: str = HOST) -> Path:
    path = folder / "podcode" / f"session-{session}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"control_url": "http://127.0.0.1:1", "token": token,
                                "host": host}))
    return path


def test_the_next_session_removes_the_token_of_a_session_killed_with_sigkill(
    tmp_path: Path,
) -> None:
    folder = tmp_path / ".vscode"
    dead = killed_session()
    dead_file = companion(folder, dead, "dead-token")
    dead_numbered = companion(folder, f"{dead}-2", "dead-token-2")
    (folder / "podcode-session.json").write_text(json.dumps({"token": "dead-token"}))
    live = companion(folder, session_id(os.getppid(), process_started(os.getppid())),
                     "live-token")
    elsewhere = companion(folder, killed_session(), "token-of-another-pod", host="other-pod")

    write_configurations(tmp_path, TASK, home=tmp_path / "home", debug=("127.0.0.1", 5678),
                         control={"control_url": "http://127.0.0.1:2", "token": "new"},
                         session="new-session")
    try:
        assert not dead_file.exists() and not dead_numbered.exists()
        assert live.exists() and elsewhere.exists()  # a live process's, another host's
        shared = json.loads((folder / "podcode-session.json").read_text())
        assert shared["token"] == "new" and shared["host"] == HOST
        own = json.loads((folder / "podcode" / "session-new-session.json").read_text())
        assert own["token"] == "new"
    finally:
        restore_workspace(tmp_path, "new-session")


def test_only_a_name_that_tells_the_process_is_pruned(tmp_path: Path) -> None:
    folder = tmp_path / ".vscode"
    kept = [companion(folder, name, "t") for name in ("", "123", "x-y", own_session_id())]
    assert prune_dead_sessions(folder) == []
    assert all(path.exists() for path in kept)
    assert not vscode_files.process_gone("session-.json")
    assert vscode_files.process_gone(f"session-{killed_session()}-3.json")
