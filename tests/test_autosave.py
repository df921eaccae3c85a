"""Edits are saved as they are made: a session killed outright (SIGKILL: ``ray job stop``,
the OOM killer) still leaves the engineer's work in the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from interactive.base.phases import Phase
from interactive.base.state import SessionState
from interactive.culler.activity import FileSampler
from interactive.culler.idle import Sample
from interactive.session.autosave import AutosavingFiles, autosaving
from tests.session_fixture import Job
from tests.waiting import wait_until

OFF = 'ide="none", port=0, control_port=0, debug_port=0'


class Files:
    """A sampler whose answers the test sets."""

    def __init__(self, *active: bool) -> None:
        self.answers = list(active)

    def sample(self, now: float) -> Sample:
        active = self.answers.pop(0)
        return Sample("files", active, 1.0, "workspace files changed" if active else "")


def test_a_save_follows_each_change_seen_into_the_session_folder() -> None:
    calls: list[float] = []
    sampler = AutosavingFiles(Files(False, True, False, True), lambda when: calls.append(when)
                              or f"store/edits/t/{when}", when=100.0)
    samples = [sampler.sample(now) for now in (110.0, 120.0, 130.0, 140.0)]
    assert [s.active for s in samples] == [False, True, False, True]  # passed on unchanged
    # the first scan looks for edits made before it; then each change; one folder for all
    assert calls == [100.0, 100.0, 100.0]
    assert sampler.saved == ["store/edits/t/100.0"] * 3


def test_a_store_that_fails_loses_nothing_but_that_save(caplog: pytest.LogCaptureFixture) -> None:
    answers = iter([RuntimeError("store down"), "store/edits/t/1"])

    def save(when: float) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    sampler = AutosavingFiles(Files(False, True), save, when=1.0)
    assert not sampler.sample(2.0).active and sampler.saved == []  # the first scan
    assert "could not save the edits" in caplog.text
    assert sampler.sample(3.0).active and sampler.saved == ["store/edits/t/1"]


def test_only_the_workspace_sampler_saves_and_only_while_the_session_waits(
    tmp_path: Path,
) -> None:
    files, other = FileSampler(tmp_path), Files(True)
    state = SessionState(task="t", state=Phase.WAITING)
    calls: list[float] = []
    wrapped = autosaving([files, other], lambda when: calls.append(when) or None, 5.0, state)
    assert isinstance(wrapped[0], AutosavingFiles) and wrapped[0].files is files
    assert wrapped[1] is other
    saver = wrapped[0]
    saver.sample(1.0)  # the first scan looks once
    assert calls == [5.0]
    state.set(state=Phase.RUNNING)  # resumed: the task's own output changes the files
    (tmp_path / "out.log").write_text("step 1\n")
    assert saver.sample(2.0).active and calls == [5.0]
    state.set(state=Phase.WARNED)  # waiting again (idle warning sent): edits count
    (tmp_path / "job.py").write_text("fixed\n")
    assert saver.sample(3.0).active and calls == [5.0, 5.0]


def test_the_edits_outlive_a_session_killed_outright(job: Job) -> None:
    job.write("job.py", f"""
        from interactive import vscode

        @vscode({OFF})
        def task(v):
            return v / 0

        print("RESULT", task(3))
        """)
    job.start(env={"PODCODE_POLL_SECONDS": "0.5"}).wait_state("waiting")
    job.write("job.py", (job.workspace / "job.py").read_text().replace("v / 0", "v * 3"))
    wait_until(lambda: any("+    return v * 3" in patch.read_text()
                           for patch in (job.home / "store" / "edits").glob("*/latest.diff")),
               "the edit saved while the session waits", timeout=30)
    assert job.proc is not None
    os.kill(job.proc.pid, signal.SIGKILL)  # no handler runs: what was saved is all there is
    job.proc.wait(30)
    shown = subprocess.run(
        [sys.executable, "-m", "interactive.cli", "edits", "job.py:task"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PODCODE_HOME": str(job.home)},
    ).stdout
    assert "-    return v / 0" in shown and "+    return v * 3" in shown
