"""``POST /api/files`` (``podcode resume --push``) writes a whole request or nothing, and
answers 400 naming the entry for names that are no file of the workspace (issue 34)."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from interactive.base.files import TEMP_SUFFIX
from interactive.doors.desktop import Desktop
from tests.cli_fixture import Controls, served_api


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[aiohttp.ClientSession]:
    async with served_api(Controls("waiting"), editors=Desktop(tmp_path, lambda: None)) as (
        session, _):
        yield session


async def push(client: aiohttp.ClientSession, files: dict[str, str]) -> tuple[int, Any]:
    async with client.post("/api/files", json={"files": files}) as response:
        return response.status, await response.json()


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its content (temporary files included)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def test_a_later_entry_that_is_a_folder_refuses_the_whole_request(
    client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("old\n")
    (tmp_path / "data").mkdir()
    before = tree(tmp_path)
    status, answer = await push(client, {"train.py": b64(b"new\n"), "pkg/new.py": b64(b"x\n"),
                                         "data": b64(b"oops\n")})
    assert status == 400
    assert "'data' is a folder in the workspace" in answer["error"]
    assert tree(tmp_path) == before and not (tmp_path / "pkg").exists()


@pytest.mark.parametrize(("name", "why"), [
    ("\ud800.py", "lone surrogate"),
    ("pkg/\udcff/x.py", "lone surrogate"),
    ("../notes.txt", "without '..'"),
    ("pkg/../../notes.txt", "without '..'"),
    ("/etc/passwd", "relative"),
    ("a\0b.py", "NUL"),
    ("/".join(["d"] * 2000) + "/x.py", "folders deep"),
    ("d/" * 40 + "x.py", "folders deep"),
    ("x" * 300 + ".py", "over 255 bytes"),
    ("/".join([c * 250 for c in "vwxyz"]) + "/x.py", "longer than"),
    ("train.py/inner.py", "train.py is a file, not a folder"),
    ("", "relative"),
])
async def test_odd_names_are_answered_400_naming_the_entry_and_nothing_is_written(
    client: aiohttp.ClientSession, tmp_path: Path, name: str, why: str
) -> None:
    (tmp_path / "train.py").write_text("old\n")
    before = tree(tmp_path)
    status, answer = await push(client, {"good.py": b64(b"x = 1\n"), name: b64(b"y\n")})
    assert status == 400, answer
    assert why in answer["error"]
    assert tree(tmp_path) == before


async def test_a_file_pushed_as_a_folder_of_another_is_refused(
    client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    status, answer = await push(client, {"pkg": b64(b"a\n"), "pkg/x.py": b64(b"b\n")})
    assert status == 400 and "pushed as a file and as the folder" in answer["error"]
    assert tree(tmp_path) == {}


async def test_odd_but_valid_names_are_written(
    client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    names = ["..\\notes.txt", "with space.py", "line\nbreak.txt", "ünïcode.py", "..x", "a/./b.py"]
    status, answer = await push(client, {name: b64(name.encode()) for name in names})
    assert status == 200, answer
    for name in names:
        assert (tmp_path / name).read_bytes() == name.encode()


async def test_a_move_that_fails_midway_puts_back_what_was_replaced(
    client: aiohttp.ClientSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names all good, the disk fails on the third move: the first two are undone."""
    (tmp_path / "a.py").write_text("old a\n")
    (tmp_path / "a.py").chmod(0o755)
    (tmp_path / "b.py").write_text("old b\n")
    before = tree(tmp_path)
    real, moves = os.replace, []

    def failing(source: Any, target: Any) -> None:
        if str(source).endswith(TEMP_SUFFIX) and not str(source).endswith(".old" + TEMP_SUFFIX):
            moves.append(target)
            if len(moves) == 3:
                raise OSError(28, "No space left on device", str(target))
        real(source, target)

    monkeypatch.setattr(os, "replace", failing)
    status, answer = await push(client, {"a.py": b64(b"new a\n"), "pkg/new.py": b64(b"n\n"),
                                         "b.py": b64(b"new b\n")})
    assert status == 500 and "nothing was written" in answer["error"]
    assert "No space left on device" in answer["error"]
    assert tree(tmp_path) == before  # no new file, no temporary file, the old contents
    assert not (tmp_path / "pkg").exists()
    assert (tmp_path / "a.py").stat().st_mode & 0o777 == 0o755
