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


def test_an_edit_of_the_same_size_within_the_timestamp_granularity_is_seen(
    tmp_path: Path,
) -> None:
    """The filesystem's clock is coarse: an edit of the same size made in the same tick as
    the snapshot leaves the file's stamp as it was; its content tells the edit."""
    script = tmp_path / "driver.py"
    script.write_text('x = config["hieght"]\n')
    stamp = script.stat().st_mtime_ns
    snapshot = Snapshot.take(tmp_path)
    script.write_text('x = config["height"]\n')
    os.utime(script, ns=(stamp, stamp))  # the same tick
    assert script.stat().st_mtime_ns == stamp
    assert snapshot.changed() == ["driver.py"]
    assert '+x = config["height"]' in snapshot.diff()


def test_a_file_stamped_long_before_the_snapshot_is_compared_by_its_stamp(
    tmp_path: Path,
) -> None:
    """Only files stamped close to the snapshot are hashed: an old file is not read again."""
    script = tmp_path / "old.py"
    script.write_text("x = 1\n")
    os.utime(script, ns=(10**18, 10**18))  # 2001
    snapshot = Snapshot.take(tmp_path)
    assert snapshot.digests == {} and snapshot.changed() == []
    script.write_text("x = 2\n")
    os.utime(script, ns=(10**18, 10**18))
    assert snapshot.changed() == [], "same stamp, long before: taken as unchanged"


def test_a_file_written_while_the_snapshot_reads_it_keeps_the_text_its_stamp_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file written between its stat and its read is read again, so the text kept is the
    one its stamp says: the edit that follows is seen against that text."""
    import interactive.storage.workspace as workspace

    script = tmp_path / "a.py"
    script.write_text("x = 1\n")
    reads: list[str | None] = []
    read = workspace._read_text

    def read_once_then_edit(path: Path) -> str | None:
        text = read(path)
        if not reads:
            touch_later(path, "x = 22\n")  # written right after the first read
        reads.append(text)
        return text

    monkeypatch.setattr(workspace, "_read_text", read_once_then_edit)
    snapshot = Snapshot.take(tmp_path)
    assert reads == ["x = 1\n", "x = 22\n"]
    assert snapshot.texts["a.py"] == "x = 22\n" and snapshot.changed() == []
