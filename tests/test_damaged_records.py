"""Damaged session records: the CLI says "record X is damaged: ..." in bounded time and
memory, never hangs on a FIFO, never reads /dev/zero, never prints a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interactive.base.record import MAX_RECORD_BYTES, RecordError, SessionRecord, load_record

GOOD = {"state": "waiting", "task": "t", "pid": 4242, "started": 1.0, "token": "x",
        "control_url": "http://127.0.0.1:8081", "debug": {"host": "127.0.0.1", "port": 5678}}


def podcode(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interactive.cli", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PODCODE_HOME": str(home)})


@pytest.mark.slow
@pytest.mark.parametrize("verb", [("status",), ("list", "--local")])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "nan", "infinity", "port", "pid", "huge",
                                  "deep", "url-port", "not-json"])
def test_the_cli_names_a_damaged_record(tmp_path: Path, kind: str, verb: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    record = home / "session.json"
    text = json.dumps(GOOD)
    if kind == "fifo":
        os.mkfifo(record)
    elif kind == "dev-zero":
        record.symlink_to("/dev/zero")
    else:
        text = {
            "nan": text.replace('"started": 1.0', '"started": NaN'),
            "infinity": text.replace('"started": 1.0', '"started": Infinity'),
            "port": text.replace('"port": 5678', '"port": 70000'),
            "pid": text.replace('"pid": 4242', '"pid": "4242x"'),
            "huge": text.replace('"task": "t"', f'"task": "{"t" * (MAX_RECORD_BYTES + 1)}"'),
            "deep": "[" * 100_000 + "]" * 100_000,
            "url-port": text.replace("8081", "99999"),
            "not-json": "{oops",
        }[kind]
        record.write_text(text)
    done = podcode(home, *verb)
    assert "Traceback" not in done.stderr, done.stderr
    assert f"record {record} is damaged:" in done.stderr, done.stderr
    if verb == ("status",):
        assert done.returncode != 0


def test_a_record_that_is_not_a_regular_file_is_refused_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "session.json"
    os.mkfifo(fifo)
    with pytest.raises(RecordError, match="not a regular file"):
        load_record(fifo)
    assert load_record(tmp_path / "missing.json") is None


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["pid", "started", "debug", "control_url", "code_server_url",
                     "last_activity", "token", "state"]),
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
              st.dictionaries(st.sampled_from(["host", "port"]),
                              st.one_of(st.integers(), st.floats(), st.text(max_size=5)))),
))
def test_any_values_read_as_a_record_or_a_damage_message(data: dict[str, object]) -> None:
    try:
        SessionRecord.from_json(data, "record.json", serving=False)
    except RecordError as exc:
        assert str(exc).startswith("record record.json is damaged: ")
