"""Any file name the workspace holds is saved with the edits (issue 34): a ``..\\notes.txt``
made in the shell once made every save fail, and the fix was lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from interactive.storage.backends import open_store
from interactive.storage.edits import save_edits, stored_name
from interactive.storage.workspace import Snapshot, git_quote

NOW = 1_700_000_000.0
ODD = ["..\\notes.txt", "back\\slash\\name.py", "line\nbreak.py", 'say "hi".txt',
       "tab\there.py", "ünïcode.py", "pkg/..\\..\\up.py"]
NOT_UTF8 = b"latin-\xe9t\xe9.txt"


def git(folder: Path, *argv: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv], cwd=folder,
                   check=True, capture_output=True)


def later(path: Path, data: bytes) -> None:
    """Write ``path`` with a modification time the snapshot cannot have seen."""
    with open(path, "wb") as handle:
        handle.write(data)
    stamp = time.time_ns() + 10_000_000
    os.utime(path, ns=(stamp, stamp))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    (folder / "pkg").mkdir(parents=True)
    (folder / "train.py").write_text("lr = 0.1\n")
    git(folder, "init", "-q")
    git(folder, "add", "train.py")
    git(folder, "commit", "-q", "-m", "start")
    return folder


def test_odd_file_names_are_saved_with_the_edits_and_the_patch_applies(
    workspace: Path, tmp_path: Path
) -> None:
    snapshot = Snapshot.take(workspace)
    later(workspace / "train.py", b"lr = 0.01\n")
    for name in ODD:
        later(workspace / name, f"name = {name!r}\n".encode())
    later(workspace / os.fsdecode(NOT_UTF8), b"bytes = 1\n")
    store = open_store({"PODCODE_STORE": str(tmp_path / "store")})

    saved = save_edits(snapshot, store, "train.fit", NOW)

    assert saved.failed == {}
    folder = Path(saved.url)
    manifest = json.loads((folder / "manifest.json").read_text())
    odd_bytes = os.fsdecode(NOT_UTF8)
    assert sorted(manifest["copied"]) == sorted([*ODD, "train.py", odd_bytes])
    for name in [*ODD, odd_bytes]:
        stored = folder / manifest["stored_as"].get(name, f"files/{name}")
        assert stored.read_bytes() == (workspace / name).read_bytes(), name
    assert (folder / "files" / "train.py").read_text() == "lr = 0.01\n"
    assert "..\\notes.txt" in manifest["stored_as"] and "train.py" not in manifest["stored_as"]

    # The patch brings every text file to a clean checkout of the same commit.
    clean = tmp_path / "clean"
    git(tmp_path, "clone", "-q", str(workspace), str(clean))
    git(clean, "apply", str(folder / "changes.diff"))
    for name in [*ODD, "train.py"]:
        assert (clean / name).read_bytes() == (workspace / name).read_bytes(), name


def test_a_file_that_cannot_be_saved_is_named_and_the_others_are_saved(
    workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshot = Snapshot.take(workspace)
    later(workspace / "train.py", b"lr = 0.01\n")
    too_long = "\\" * 200 + ".py"  # 200 backslashes: 600 bytes once quoted, over NAME_MAX
    later(workspace / too_long, b"x = 1\n")
    store = open_store({"PODCODE_STORE": str(tmp_path / "store")})

    saved = save_edits(snapshot, store, "train.fit", NOW)

    assert list(saved.failed) == [too_long]
    folder = Path(saved.url)
    assert (folder / "files" / "train.py").read_text() == "lr = 0.01\n"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["copied"] == ["train.py"] and list(manifest["failed"]) == [too_long]
    assert "could not save the changed file" in caplog.text
    assert "+lr = 0.01" in (folder / "changes.diff").read_text()


@pytest.mark.parametrize(("name", "stored"), [
    ("train.py", "files/train.py"),
    ("pkg/ünï code.py", "files/pkg/ünï code.py"),
    ("100%.py", "files/100%.py"),
    ("..\\notes.txt", "quoted/..%5Cnotes.txt"),
    ("a\nb", "quoted/a%0Ab"),
    (os.fsdecode(b"\xff"), "quoted/%FF"),
])
def test_stored_names(name: str, stored: str) -> None:
    assert stored_name(name) == stored


def test_git_quotes_the_names_it_must(tmp_path: Path) -> None:
    assert git_quote("a/train.py") == "a/train.py"
    assert git_quote("a/ü.py") == "a/ü.py"
    assert git_quote("a/..\\notes.txt") == '"a/..\\\\notes.txt"'
    assert git_quote("a/x\ny") == '"a/x\\ny"'
    assert git_quote(os.fsdecode(b"a/\xff")) == '"a/\\377"'
    assert shutil.which("git")
