"""torchrun's elastic agent composes with podcode's sessions.

While the ranks wait in their sessions the agent restarts nothing (no rank has
exited); an aborted session ends its rank with the task's own error, and the
agent's own restart (``--max-restarts``) then runs the job again, which here
succeeds: the bug is hit only by the first attempt, as a transient fault is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import torchrun_job
from tests.torchrun_job import BUG, Torchrun, post

pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.slow

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
