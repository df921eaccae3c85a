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


def _configurations(workspace: Path, session: str) -> None:
    from interactive.base.types import TaskRef
    from interactive.doors import vscode_files

    vscode_files.write_configurations(
        workspace, TaskRef("jobs.train", "jobs", "train", None), home=workspace.parent / "h",
        debug=("127.0.0.1", 5678), control={"control_url": "http://127.0.0.1:1", "token": "t"},
        session=session)


def test_another_sessions_files_in_the_workspace_are_not_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions of one workspace: what the other one writes into .vscode (its merged
    launch.json and settings.json, its session files and their temporaries, its notebook)
    and what it puts back when it ends are not this session's edits."""
    from interactive.doors import vscode_files

    workspace = tmp_path / "ws"
    (workspace / ".vscode").mkdir(parents=True)
    (workspace / ".vscode" / "launch.json").write_text('{"configurations": [{"name": "mine"}]}')
    (workspace / "train.py").write_text("x = 1\n")
    _configurations(workspace, "111-1")
    snapshot = Snapshot.take(workspace)
    monkeypatch.setattr(vscode_files, "_users", {})  # the other session: another process
    _configurations(workspace, "222-2")
    vscode = workspace / ".vscode"
    for temporary in (".podcode-session.json.222.0a1b2c3d.partial",
                      ".launch.json.222.deadbeef.partial", "podcode/.written.json.2.0f.partial"):
        (vscode / temporary).write_text("half")
    (vscode / "podcode" / "notebook-222-2.ipynb").write_text("{}")
    (workspace / "sub" / ".vscode" / "podcode").mkdir(parents=True)  # a session of sub/
    (workspace / "sub" / ".vscode" / "podcode-session.json").write_text('{"token": "s"}')
    (workspace / "sub" / ".vscode" / "podcode" / "rerun_x.py").write_text("x")
    touch_later(workspace / "train.py", "x = 2\n")
    assert snapshot.changed() == ["train.py"]

    vscode_files.restore_workspace(workspace, "222-2")  # the other ends: the user's file back
    assert not (vscode / "settings.json").exists()
    assert "mine" in (vscode / "launch.json").read_text()
    assert snapshot.changed() == ["train.py"]


def test_an_edit_of_launch_json_is_the_engineers(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _configurations(workspace, "111-1")
    snapshot = Snapshot.take(workspace)
    launch = workspace / ".vscode" / "launch.json"
    touch_later(launch, launch.read_text().replace('"version"', '"my_key": 1, "version"'))
    assert snapshot.changed() == [".vscode/launch.json"]
    assert '"my_key": 1' in snapshot.diff()


def test_podcode_homes_and_stores_inside_the_workspace_are_not_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interactive.storage.backends import open_store
    from interactive.storage.edits import save_edits

    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("PODCODE_STORE", str(workspace / "own-store"))
    (workspace / "train.py").write_text("x = 1\n")
    snapshot = Snapshot.take(workspace)
    touch_later(workspace / "train.py", "x = 2\n")
    other = open_store({"PODCODE_STORE": str(workspace / "stores" / "b")})
    save_edits(snapshot, other, "t", 1.0)  # another session's store: marked as one
    old = workspace / "old-store" / "edits" / "t"  # a store of an older podcode: no marker
    old.mkdir(parents=True)
    (old / "latest.diff").write_text("diff")
    home = workspace / "homes" / "b"  # another session's home (it holds a record)
    (home / "sessions" / "9-9").mkdir(parents=True)
    (home / "sessions" / "9-9" / "session.json").write_text('{"token": "secret"}')
    (home / "notes.txt").write_text("x")
    (workspace / "sessions" / "mine").mkdir(parents=True)  # a folder of the user's so named
    (workspace / "sessions" / "mine" / "notes.txt").write_text("y")
    assert snapshot.changed() == ["sessions/mine/notes.txt", "train.py"]
    save_edits(snapshot, open_store(), "t", 2.0)  # its own store, inside the workspace
    assert (workspace / "own-store" / "edits").is_dir()
    assert snapshot.changed() == ["sessions/mine/notes.txt", "train.py"]


def test_a_large_new_file_is_named_in_the_diff_not_read(tmp_path: Path) -> None:
    snapshot = Snapshot.take(tmp_path)
    (tmp_path / "big.txt").write_bytes(b"text\n" * (4 * 1024 * 1024))  # 20 MiB of text
    assert snapshot.diff(["big.txt"]) == "Binary or large file big.txt changed\n"
