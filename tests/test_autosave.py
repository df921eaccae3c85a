"""Edits are saved as they are made: a session killed outright (SIGKILL: ``ray job stop``,
the OOM killer) still leaves the engineer's work in the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from interactive.base.phases import Phase
from interactive.base.state import SessionState
from interactive.reaper.activity import FileSampler
from interactive.reaper.idle import Sample
from interactive.session.autosave import AutosavingFiles, EditSaver, autosaving
from interactive.storage.edits import SaveLimits
from interactive.storage.workspace import Snapshot
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
    sampler = AutosavingFiles(Files(False, True, False, True), lambda when, stop: calls.append(
        when) or f"store/edits/t/{when}", when=100.0)
    samples = [sampler.sample(now) for now in (110.0, 120.0, 130.0, 140.0)]
    assert [s.active for s in samples] == [False, True, False, True]  # passed on unchanged
    # the first scan looks for edits made before it; then each change; one folder for all
    assert calls == [100.0, 100.0, 100.0]
    assert sampler.saved == ["store/edits/t/100.0"] * 3


def test_a_store_that_fails_loses_nothing_but_that_save(caplog: pytest.LogCaptureFixture) -> None:
    answers = iter([RuntimeError("store down"), "store/edits/t/1"])

    def save(when: float, stop: object) -> str:
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
    wrapped = autosaving([files, other], lambda when, stop: calls.append(when) or None, 5.0,
                         state)
    assert isinstance(wrapped[0], AutosavingFiles) and wrapped[0].files is files
    assert wrapped[1] is other
    saver = wrapped[0]
    saver.sample(1.0)  # the first scan looks once
    assert calls == [5.0]
    state.set(state=Phase.RESUMING)
    state.set(state=Phase.RUNNING)  # resumed: the task's own output changes the files
    (tmp_path / "out.log").write_text("step 1\n")
    assert saver.sample(2.0).active and calls == [5.0]
    state.set(state=Phase.WAITING)
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


def test_a_save_in_progress_stops_once_the_session_no_longer_waits() -> None:
    state = SessionState(task="t", state=Phase.WAITING)
    stops: list[bool] = []

    def save(when: float, *, stop: Callable[[], bool] | None = None) -> str:
        assert stop is not None
        stops.append(stop())
        state.set(state=Phase.FAILED)  # the session closes while the save copies
        stops.append(stop())
        return "store/edits/t/1"

    sampler = autosaving([FileSampler(Path("."))], save, 1.0, state)[0]
    assert isinstance(sampler, AutosavingFiles)
    sampler._save()
    assert stops == [False, True]


def _edited(tmp_path: Path) -> Snapshot:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    snapshot = Snapshot.take(workspace)
    for index in range(3):
        (workspace / f"f{index}.py").write_text("x" * (index + 1))
    return snapshot


def test_what_a_save_leaves_out_is_in_the_sessions_notes_until_one_saves_all(
    tmp_path: Path,
) -> None:
    snapshot, state = _edited(tmp_path), SessionState(task="t", state=Phase.WAITING)
    saver = EditSaver("t", state, SaveLimits(max_files=2))
    url = saver.save(snapshot, 1.0)
    assert url is not None
    manifest = json.loads((Path(url) / "manifest.json").read_text())
    assert list(manifest["left_out"]) == ["f2.py"]
    assert [note for note in state.notes if "left some changed files out" in note]
    assert "at most 2 files" in state.notes[-1]
    saver.limits = SaveLimits()
    saver.save(snapshot, 2.0)
    assert not [note for note in state.notes if "left some changed files out" in note]


def test_after_sigterm_saves_end_within_the_grace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot = _edited(tmp_path)
    now = [100.0]
    saver = EditSaver("t", SessionState(task="t"), clock=lambda: now[0])
    saver.preempted(25.0)
    assert saver.limits.deadline == 125.0
    assert saver.save(snapshot, 1.0) is not None  # within the grace: saved
    now[0] = 125.0
    assert saver.save(snapshot, 2.0) is None  # the grace is over: nothing started
    assert "no time left to save the edits" in caplog.text


def test_sigterm_during_a_long_save_exits_within_the_grace(job: Job, tmp_path: Path) -> None:
    """A save that would take minutes (a slow store, many changed files) is cut short
    between two files when SIGTERM's grace is over: the process exits 143 at once after."""
    job.write("job.py", f"""
        import time

        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        class Slow(LocalFileSystem):
            protocol = ("slowfile",)

            def put_file(self, lpath, rpath, **kwargs):
                time.sleep(0.25)  # a store far away
                return super().put_file(lpath, rpath, **kwargs)

        fsspec.register_implementation("slowfile", Slow, clobber=True)
        from interactive import vscode

        @vscode({OFF}, preempt_grace_seconds=1)
        def task(v):
            return v / 0

        print("RESULT", task(3))
        """)
    store = tmp_path / "store"
    job.start(env={"PODCODE_POLL_SECONDS": "0.5", "PODCODE_STORE": f"slowfile://{store}"})
    job.wait_state("waiting")
    data = job.workspace / "data"
    data.mkdir()
    for index in range(400):  # 100 s of copying to that store
        (data / f"part{index:03}.txt").write_text(f"{index}\n")
    wait_until(lambda: any(store.glob("edits/*/*/files/data/*.txt")), "the save to start",
               timeout=30)
    assert job.proc is not None
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait_exit(timeout=30) == 143, job.output()
    manifests = [json.loads(path.read_text()) for path in store.glob("edits/*/*/manifest.json")]
    assert any("the save's time was up (the pod is going)" in m["left_out"].values()
               or "the session ended during the save" in m["left_out"].values()
               for m in manifests), job.output()
    assert len(list(store.glob("edits/*/*/files/data/*.txt"))) < 400
