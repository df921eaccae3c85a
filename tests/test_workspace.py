from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from interactive.storage.workspace import Snapshot


def touch_later(path: Path, text: str | bytes) -> None:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    stamp = time.time_ns() + 10_000_000
    os.utime(path, ns=(stamp, stamp))


def test_changed_lists_added_modified_and_deleted(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "gone.py").write_text("y = 2\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    snapshot = Snapshot.take(tmp_path)
    assert snapshot.changed() == []
    touch_later(tmp_path / "a.py", "x = 10\n")
    (tmp_path / "gone.py").unlink()
    (tmp_path / "new.py").write_text("z = 3\n")
    touch_later(tmp_path / ".git" / "HEAD", "other")
    assert snapshot.changed() == ["a.py", "gone.py", "new.py"]
    diff = snapshot.diff()
    assert "-x = 1\n+x = 10\n" in diff and "-y = 2" in diff and "+z = 3" in diff
    assert "--- a/a.py" in diff


def test_binary_files_are_named_not_diffed(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"\0\1\2")
    snapshot = Snapshot.take(tmp_path)
    touch_later(tmp_path / "w.bin", b"\0\1\3\4")
    assert snapshot.diff() == "Binary or large file w.bin changed\n"


def test_walk_is_bounded(tmp_path: Path) -> None:
    for index in range(30):
        (tmp_path / f"f{index:02}.txt").write_text("x")
    assert len(Snapshot.take(tmp_path, max_files=10).stamps) == 10


def test_podcode_files_are_not_edits(tmp_path: Path) -> None:
    snapshot = Snapshot.take(tmp_path)
    (tmp_path / ".vscode" / "podcode").mkdir(parents=True)
    (tmp_path / ".vscode" / "podcode" / "rerun_t.py").write_text("x")
    (tmp_path / ".vscode" / "podcode-session.json").write_text('{"token": "secret"}')
    (tmp_path / ".vscode" / "launch.json").write_text("{}")
    assert snapshot.changed() == [".vscode/launch.json"]


def test_a_podcode_home_inside_the_workspace_is_never_an_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "state" / "podcode"
    home.mkdir(parents=True)
    monkeypatch.setenv("PODCODE_HOME", str(home))
    (tmp_path / "train.py").write_text("x = 1\n")
    snapshot = Snapshot.take(tmp_path)
    (home / "session.json").write_text('{"token": "secret"}')  # a record, with its secret
    (tmp_path / "train.py").write_text("x = 2\n")
    assert snapshot.changed() == ["train.py"]
    assert "secret" not in snapshot.diff()
