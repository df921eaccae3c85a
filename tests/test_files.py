"""Whole files or nothing (permissions, failures, durability) and JSON with comments."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from interactive.base import files
from interactive.base.files import (
    TEMP_SUFFIX,
    atomic_open,
    atomic_path,
    parse_jsonc,
    replace_folder,
    strip_jsonc,
    temp_pattern,
    write_bytes,
    write_json,
)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(TEMP_SUFFIX))


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask() -> Iterator[None]:
    """A umask that would narrow (0o077) what the writer asks for; restored afterwards."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def test_an_existing_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "state.bin"
    target.write_bytes(b"old" * 1000)
    write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and leftovers(tmp_path) == []


@pytest.mark.usefixtures("umask")
def test_permissions_are_exactly_those_asked_from_the_first_byte(tmp_path: Path) -> None:
    seen: list[int] = []
    target = tmp_path / "public.json"
    with atomic_open(target, "w", permissions=0o644) as handle:
        temp = next(tmp_path.glob(temp_pattern(target, os.getpid())))
        seen.append(mode_of(temp))  # the temporary file, before any data
        handle.write("{}")
    assert seen == [0o644] and mode_of(tmp_path / "public.json") == 0o644
    write_json(tmp_path / "secret.json", {"token": "t"}, mode=0o600)
    assert mode_of(tmp_path / "secret.json") == 0o600
    write_bytes(tmp_path / "default.bin", b"x")
    assert mode_of(tmp_path / "default.bin") == files.PRIVATE


def test_replacing_a_wide_file_narrows_it(tmp_path: Path) -> None:
    target = tmp_path / "session.json"
    target.write_text("{}")
    target.chmod(0o666)
    write_json(target, {"token": "t"}, mode=0o600)
    assert mode_of(target) == 0o600


def test_a_write_that_fails_midway_leaves_the_old_file_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    with pytest.raises(OSError, match="disk full"), atomic_open(target) as handle:
        handle.write(b"n" * (1 << 20))
        assert target.read_bytes() == b"old"  # nothing of the new data is visible yet
        raise OSError(28, "disk full")
    assert target.read_bytes() == b"old" and leftovers(tmp_path) == []


def test_a_failing_rename_leaves_the_old_file_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    write_json(target, {"v": 1})

    def refuse(source: object, destination: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1} and leftovers(tmp_path) == []


def test_the_temporary_file_is_new_never_an_existing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """O_EXCL: a file already at the temporary name (or a link planted there) is left
    alone, and another name is used."""
    names = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda size: next(names))
    target = tmp_path / "launch.json"
    planted = tmp_path / f".launch.json.{os.getpid()}.aaaa{TEMP_SUFFIX}"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    planted.symlink_to(victim)
    write_json(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert victim.read_text() == "keep" and planted.is_symlink()


def test_temporary_files_are_found_by_the_pattern_of_their_process(tmp_path: Path) -> None:
    target = tmp_path / "session.json"
    with atomic_open(target, "w") as handle:
        [temp] = tmp_path.glob(temp_pattern(target, os.getpid()))
        assert temp.name.startswith(".session.json.") and temp.name.endswith(TEMP_SUFFIX)
        assert list(tmp_path.glob(temp_pattern(target, os.getpid() + 1))) == []
        handle.write("{}")
    assert not temp.exists()


@pytest.mark.parametrize(("durable", "calls"), [(True, 2), (False, 0)])
def test_durable_writes_sync_the_file_and_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool, calls: int
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    write_bytes(tmp_path / "x.bin", b"x", durable=durable)
    assert len(synced) == calls


def test_write_json_is_indented_with_a_final_newline(tmp_path: Path) -> None:
    write_json(tmp_path / "a.json", {"b": [1]})
    assert (tmp_path / "a.json").read_text() == '{\n  "b": [\n    1\n  ]\n}\n'


def test_text_mode_is_utf8(tmp_path: Path) -> None:
    with atomic_open(tmp_path / "t.txt", "w") as handle:
        handle.write("größe ✓")
    assert (tmp_path / "t.txt").read_bytes() == "größe ✓".encode()


def test_only_whole_file_modes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="whole files"), atomic_open(tmp_path / "x", "ab"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_atomic_path_replaces_only_what_was_written(tmp_path: Path) -> None:
    target = tmp_path / "model.pt"
    target.write_bytes(b"old")
    with atomic_path(target) as temp:
        assert temp.exists() and temp.name.endswith(TEMP_SUFFIX)
        temp.unlink()  # a library that removes and re-creates its file
        temp.write_bytes(b"new")
    assert target.read_bytes() == b"new"
    with pytest.raises(FileNotFoundError, match="nothing was written"), atomic_path(target) as tmp:
        tmp.unlink()
    assert target.read_bytes() == b"new" and leftovers(tmp_path) == []


def test_replace_folder_swaps_a_finished_folder_in(tmp_path: Path) -> None:
    folder, staging = tmp_path / "inputs", tmp_path / ".inputs.staging"
    folder.mkdir()
    (folder / "old.bin").write_bytes(b"old")
    staging.mkdir()
    (staging / "new.bin").write_bytes(b"new")
    replace_folder(staging, folder)
    assert [p.name for p in folder.iterdir()] == ["new.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["inputs"]


# -- JSON with comments (VS Code's launch.json and settings.json) --------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{\n // a "quoted" comment\n "a": "http://x//y", /* block */ "b": [1, 2,],\n}',
         {"a": "http://x//y", "b": [1, 2]}),
        ('{"a": 1, // after the last one\n}', {"a": 1}),
        ('{"a": [1, /* c */ ], "b": {"c": 2 , } , }', {"a": [1], "b": {"c": 2}}),
        ('{"s": "a,]", "t": "b,}", "u": "/* not a comment */"}',
         {"s": "a,]", "t": "b,}", "u": "/* not a comment */"}),
        ('{"q": "say \\"//hi\\"", "e": "\\\\"} // end', {"q": 'say "//hi"', "e": "\\"}),
        ('/* multi\n line\n */ [1]', [1]),
        ("{}", {}),
    ],
)
def test_jsonc_comments_and_trailing_commas(text: str, expected: object) -> None:
    assert parse_jsonc(text) == expected
    assert json.loads(strip_jsonc(text)) == expected


def test_plain_json_is_unchanged_and_bad_json_raises() -> None:
    plain = '{"a": [1, 2], "b": "c"}'
    assert strip_jsonc(plain) == plain
    for bad in ('{"a": }', '{"a": 1 /* unclosed', "[1,,]"):
        with pytest.raises(ValueError):
            parse_jsonc(bad)
