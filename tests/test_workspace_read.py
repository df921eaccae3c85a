"""Reading and searching the workspace for an agent: only the workspace's own text files,
each answer bounded and saying what it cut."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from interactive.doors import workspace_read
from interactive.doors.desktop import Refused
from interactive.doors.workspace_read import MAX_LINES, MAX_MATCHES, NotText, read_lines, search


def test_lines_are_numbered_and_bounded(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 5001)))
    first = read_lines(tmp_path, "big.py")
    assert (first["start"], first["end"], first["total_lines"]) == (1, MAX_LINES, 5000)
    assert first["text"].splitlines()[0] == "     1\tx1 = 1"
    assert f"read on from line {MAX_LINES + 1}" in first["note"]
    window = read_lines(tmp_path, "big.py", 4999, 9000)
    assert window["text"].splitlines() == ["  4999\tx4999 = 4999", "  5000\tx5000 = 5000"]
    assert window["end"] == 5000 and not window["truncated"]
    wide = tmp_path / "wide.txt"
    wide.write_text(("w" * 1000 + "\n") * 500)
    cut = read_lines(tmp_path, "wide.txt")
    assert cut["truncated"] and len(cut["text"].encode()) <= workspace_read.MAX_FILE_BYTES
    assert f"read on from line {cut['end'] + 1}" in cut["note"]
    with pytest.raises(Refused, match="line numbers"):
        read_lines(tmp_path, "big.py", 0)


def test_only_the_workspaces_own_text_files_are_read(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".vscode" / "podcode").mkdir(parents=True)
    (workspace / ".vscode" / "podcode-session.json").write_text('{"token": "t"}')
    (workspace / ".vscode" / "podcode" / "session-1.json").write_text('{"token": "t"}')
    (workspace / "home" / "sessions" / "1").mkdir(parents=True)
    (workspace / "home" / "sessions" / "1" / "session.json").write_text('{"token": "t"}')
    (workspace / "model.bin").write_bytes(b"\0\1\2")
    (tmp_path / "secret.txt").write_text("outside")
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    for name, error, words in [
        (".vscode/podcode-session.json", Refused, "podcode's own"),
        (".vscode/podcode/session-1.json", Refused, "podcode's own"),
        ("home/sessions/1/session.json", Refused, "podcode's own"),
        ("model.bin", NotText, "binary"), ("missing.py", NotText, "no such file"),
        ("../secret.txt", Refused, "without '..'"), ("link.txt", Refused, "outside"),
        ("/etc/passwd", Refused, "relative"),
    ]:
        with pytest.raises(error, match=words):
            read_lines(workspace, name)


def test_search_finds_lines_filters_by_glob_and_stops_at_its_bounds(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import os\nx = os.getcwd()\n")
    (tmp_path / "notes.md").write_text("os is the module\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("os\n")
    found = search(tmp_path, r"\bos\b", "*.py")
    assert [(m["path"], m["line"]) for m in found["matches"]] == [("pkg/a.py", 1), ("pkg/a.py", 2)]
    assert not found["truncated"] and found["files_searched"] == 1
    every = search(tmp_path, r"\bos\b")
    assert {m["path"] for m in every["matches"]} == {"pkg/a.py", "notes.md"}  # not .git
    (tmp_path / "many.txt").write_text("hit\n" * (MAX_MATCHES + 10))
    many = search(tmp_path, "hit")
    assert len(many["matches"]) == MAX_MATCHES and many["truncated"]
    with pytest.raises(Refused, match="not a valid regular expression: missing \\)"):
        search(tmp_path, "(open")


def test_a_search_past_its_time_says_it_stopped(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"f{i}.py").write_text("hit\n")
    ticks = itertools.count(0.0, workspace_read.SEARCH_SECONDS / 2 + 0.1)  # fake time
    found = search(tmp_path, "hit", clock=lambda: next(ticks))
    assert found["truncated"] and "stopped after" in found["note"]
    assert len(found["matches"]) < 3
