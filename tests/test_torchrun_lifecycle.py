"""torchrun's jobs through a session's end: the elastic agent's restart, and idle cleanup.

While the ranks wait in their sessions the agent restarts nothing (no rank has
exited); an aborted session ends its rank with the task's own error, and the
agent's own restart (``--max-restarts``) then runs the job again, which here
succeeds: the bug is hit only by the first attempt, as a transient fault is.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from tests import torchrun_job
from tests.smtp_fixture import SmtpServer
from tests.torchrun_job import BUG, Torchrun, post

pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.slow

OWNER = "trainer@test.example"

TRANSIENT = (
    'if __import__("os").environ["TORCHELASTIC_RESTART_COUNT"] == "0":\n'
    '            raise ValueError(f"bad batch on rank {rank}")'
)
"""Rank 1's bug, hit by the first attempt only (torchrun counts its restarts in the variable)."""


def transient_bug(workspace: Path) -> None:
    script = torchrun_job.copy_example(workspace)
    text = script.read_text()
    assert BUG in text
    script.write_text(text.replace(BUG, TRANSIENT))


def test_an_aborted_session_lets_the_agent_restart_the_job(
    tmp_path: Path, podcode_home: Path
) -> None:
    workspace = tmp_path / "workspace"
    transient_bug(workspace)
    job = Torchrun(workspace, podcode_home, launcher=("--max-restarts", "1"))
    try:
        failed = job.wait_waiting(1)
        assert failed["error"].startswith("ValueError: bad batch on rank 1")
        job.wait_waiting(0)
        # Both ranks wait; no rank has exited, so the agent restarted nothing behind them.
        assert job.proc.poll() is None
        assert "Restarting" not in job.output() and "total" not in job.output()
        assert post(failed, "/api/abort")[0] == 202
        try:
            code = job.proc.wait(120)
        except Exception:
            raise AssertionError(f"the job never ended:\n{job.output()}") from None
        output = job.output()
        assert code == 0, f"torchrun exited with {code}:\n{output}"
        # The second attempt (the agent's restart, without sessions) did the work.
        assert "rank 0 total 9.0" in output and "rank 1 total 9.0" in output, output
    finally:
        job.stop()


def test_idle_ranks_are_warned_then_cleaned_up_with_the_edits_saved(
    tmp_path: Path, podcode_home: Path, smtp_server: SmtpServer
) -> None:
    """Every rank's session is reaped after its warning; the edits are saved; no rank is left."""
    workspace = tmp_path / "workspace"
    torchrun_job.copy_example(workspace)
    store = tmp_path / "store"
    job = Torchrun(workspace, podcode_home, env={
        "PODCODE_MAX_IDLE_SECONDS": "3",
        "PODCODE_GRACE_SECONDS": "2",
        "PODCODE_SMTP_URL": smtp_server.url,
        "PODCODE_MAIL_FROM": "podcode@test.example",
        "PODCODE_OWNER": OWNER,
        "PODCODE_STORE": str(store),
    })
    try:
        job.wait_waiting(1)
        job.wait_waiting(0)
        (workspace / "notes.py").write_text("LR = 0.05\n")  # an edit, saved at cleanup
        try:
            code = job.proc.wait(120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"idle ranks were never cleaned up:\n{job.output()}") from None
        assert code != 0
        subjects = [message["Subject"] for message in smtp_server.wait_for(2, timeout=30)]
        assert any("is idle" in subject for subject in subjects), subjects
        assert any("cleaned up" in subject for subject in subjects), subjects
        assert all(message["To"] == OWNER for message in smtp_server.messages)
        saved = [path.read_text() for path in store.rglob("files/notes.py")]
        assert "LR = 0.05\n" in saved, sorted(str(p) for p in store.rglob("*"))
        left = [p for p in psutil.Process().children(True) if "allreduce" in " ".join(p.cmdline())]
        assert left == []
    finally:
        job.stop()
