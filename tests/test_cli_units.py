"""Small pure pieces of the CLI: session records, launch.json merging, durations, tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interactive.base.sessionfile import (
    SessionFileError,
    connectable,
    parse_records,
    parse_session,
    too_open,
)
from interactive.cli.launch_json import attach_configuration, merge_launch
from interactive.cli.output import duration, table, until


def test_wildcard_control_urls_become_loopback() -> None:
    assert connectable("http://0.0.0.0:8081") == "http://127.0.0.1:8081"
    assert connectable("http://[::]:8081") == "http://127.0.0.1:8081"
    assert connectable("http://10.1.2.3:8081") == "http://10.1.2.3:8081"


def test_a_session_record_needs_url_and_token() -> None:
    with pytest.raises(SessionFileError, match="has no token"):
        parse_session({"control_url": "http://127.0.0.1:1"}, "x")
    with pytest.raises(SessionFileError, match="not a JSON object"):
        parse_session([], "x")
    record = parse_session({"control_url": "http://127.0.0.1:1", "token": "t", "state": "done",
                            "debug": {"host": "127.0.0.1", "port": 5678}}, "x")
    assert record.ended and record.debug_port == 5678 and record.pid is None
    with pytest.raises(SessionFileError, match="^record x is damaged: pid True"):
        parse_session({"control_url": "http://127.0.0.1:1", "token": "t", "pid": True}, "x")


def test_secrets_stay_out_of_repr() -> None:
    record = parse_session({"control_url": "http://127.0.0.1:1", "token": "tok-xyz",
                            "password": "pw-xyz"}, "x")
    assert "tok-xyz" not in repr(record) and "pw-xyz" not in repr(record)


def test_file_mode_check(tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    path.write_text("{}")
    path.chmod(0o644)
    assert too_open(path)
    path.chmod(0o600)
    assert not too_open(path)


def test_records_read_back_to_back() -> None:
    text = '{"pid": 1}\n{"pid": 2, "token": "t"}\n{broken\n[3]\n{"pid": 4}\n'
    assert parse_records(text) == [{"pid": 1}, {"pid": 2, "token": "t"}, {"pid": 4}]
    assert parse_records("") == [] and parse_records("nothing") == []


def test_merge_replaces_only_its_own_configuration(tmp_path: Path) -> None:
    path = tmp_path / ".vscode" / "launch.json"
    first = attach_configuration("podcode: p", "127.0.0.1", 5678, "${workspaceFolder}", "/src")
    assert merge_launch(path, first) is False
    path.write_text(json.dumps({"version": "0.2.0", "configurations": [
        {"name": "mine", "type": "debugpy", "request": "launch"}, first]}))
    second = attach_configuration("podcode: p", "127.0.0.1", 6000, "${workspaceFolder}", "/src")
    merge_launch(path, second)
    merged = json.loads(path.read_text())["configurations"]
    assert [c["name"] for c in merged] == ["mine", "podcode: p"]
    assert merged[1]["connect"]["port"] == 6000


def test_merge_refuses_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "launch.json"
    path.write_text("{ nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        merge_launch(path, attach_configuration("n", "h", 1, "l", None))
    assert path.read_text() == "{ nope"


def test_durations_and_tables() -> None:
    assert [duration(s) for s in (5, 125, 3 * 3600 + 300, 3 * 86400 + 7200)] == [
        "5s", "2m", "3h05m", "3d02h"]
    assert until(None, 0) == "-" and until(10, 20) == "due now" and until(130, 10) == "in 2m"
    assert table(("A", "BB"), [("xyz", "1")]).splitlines() == ["A     BB", "xyz   1"]


def test_every_help_example_parses() -> None:
    """The examples in ``podcode --help`` are real command lines."""
    import shlex

    from interactive.cli import split_command
    from interactive.cli.parser import EXAMPLES, build_parser

    lines = [line.strip() for line in EXAMPLES.splitlines()[1:] if line.strip()]
    assert len(lines) >= 8
    for line in lines:
        command = line.split("|")[0].split("   ")[0]
        argv, _ = split_command(shlex.split(command))  # as run() does
        assert argv[0] == "podcode"
        args, rest = build_parser().parse_known_args(argv[1:])
        assert args.verb and not rest, line
