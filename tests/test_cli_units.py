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


def test_help_loads_only_the_parser() -> None:
    """``podcode --help`` and a verb's ``--help`` start at the speed of ``python``: of
    podcode, only the parser loads, and nothing a verb needs to run."""
    import subprocess
    import sys

    code = ("import contextlib, io, json, sys\nbefore = set(sys.modules)\n"
            "from interactive.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as shown:\n"
            "    codes = [main(['--help']), main(['attach', '--help'])]\n"
            "print(json.dumps([codes, 'attach' in shown.getvalue(),\n"
            "                  sorted(set(sys.modules) - before)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    codes, helped, loaded = json.loads(done.stdout)
    assert codes == [0, 0] and helped
    ours = {m for m in loaded if m.split(".")[0] == "interactive"}
    assert ours == {"interactive", "interactive.base", "interactive.base.errors",
                    "interactive.cli", "interactive.cli.exits", "interactive.cli.parser"}
    assert not {m.split(".")[0] for m in loaded} & {"logging", "http", "webbrowser", "json"}


def test_a_verbs_options_are_built_when_that_verb_is_parsed() -> None:
    import argparse

    from interactive.cli.parser import VERBS, build_parser

    parser = build_parser(lazy=True)
    args = parser.parse_args(["keepalive", "train-0", "--seconds", "60"])
    assert args.verb == "keepalive" and args.pod == "train-0" and args.seconds == 60.0
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    unbuilt = {name for name, sub in verbs.choices.items() if sub.fill is not None}
    assert unbuilt == {name for name, _, fill, _ in VERBS if fill is not None} - {"keepalive"}
