"""Session records: one folder per session, the home's session.json claimed atomically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from interactive.base import record
from interactive.base.identity import own_session_id, process_identity, process_started, session_id
from interactive.base.phases import Phase

ME = process_identity()


def never_running(pid: object, started: object) -> bool:
    return False


def always_running(pid: object, started: object) -> bool:
    return True


def test_a_session_is_named_after_its_process(tmp_path: Path) -> None:
    assert session_id(4242, 1712345678.12) == "4242-171234567812"
    assert own_session_id() == session_id(os.getpid(), process_started(os.getpid()))
    assert record.session_dir(tmp_path) == tmp_path / "sessions" / own_session_id()
    rank = tmp_path / "rank-1"
    assert record.record_paths(rank, tmp_path) == [
        rank / "sessions" / own_session_id() / "session.json",
        rank / "session.json",
        tmp_path / "session.json",
    ]
    assert len(record.record_paths(tmp_path, tmp_path)) == 2


def test_records_are_private_at_every_level(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = record.write_session(record.session_dir(home), {"token": "t"})
    assert path.stat().st_mode & 0o777 == 0o600
    for folder in (home, home / "sessions", path.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


@pytest.mark.parametrize(
    ("current", "running", "expected"),
    [
        (None, always_running, True),
        ({"pid": ME["pid"], "started": ME["started"], "state": "waiting"}, always_running, True),
        ({"pid": 1, "started": 5.0, "state": "waiting"}, always_running, False),
        ({"pid": 1, "started": 5.0, "state": "waiting"}, never_running, True),
        ({"pid": 1, "started": 5.0, "state": "done"}, always_running, True),
        ({"pid": 1, "started": 5.0, "state": "waiting", "process_gone_at": 9.0},
         always_running, True),
    ],
    ids=["free", "ours", "another live session", "stale", "ended", "marked gone"],
)
def test_who_may_claim_the_home(
    current: dict[str, object] | None, running: record.Running, expected: bool
) -> None:
    assert record.may_claim(current, ME["pid"], ME["started"], running) is expected


def test_a_live_claim_is_kept_and_a_stale_one_taken_over(tmp_path: Path) -> None:
    other = {"pid": 1, "started": 5.0, "state": "waiting", "task": "other"}
    record.write_session(tmp_path, other)
    assert not record.write_claimed(tmp_path, {"task": "mine", **ME}, always_running)
    assert record.read_session(tmp_path) == other
    assert record.write_claimed(tmp_path, {"task": "mine", **ME}, never_running)
    assert record.read_session(tmp_path)["task"] == "mine"  # type: ignore[index]


CLAIM = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from interactive.base import record
    from interactive.base.identity import process_identity
    sys.stdin.readline()  # start together
    won = record.write_claimed(Path(sys.argv[1]), {"state": "waiting", **process_identity()})
    print(won, flush=True)
    sys.stdin.readline()  # stay alive until every contender has tried
""")


def test_two_processes_claiming_at_once_one_wins(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for attempt in range(3):
        home = tmp_path / f"home-{attempt}"
        procs = [
            subprocess.Popen([sys.executable, "-c", CLAIM, str(home)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(4)
        ]
        for proc in procs:
            proc.stdin.write("go\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        results = [proc.stdout.readline().strip() for proc in procs]  # type: ignore[union-attr]
        for proc in procs:
            proc.communicate("done\n", timeout=30)
        assert sorted(results) == ["False", "False", "False", "True"]
        winner = procs[results.index("True")].pid
        assert record.read_session(home)["pid"] == winner  # type: ignore[index]


def test_a_dead_process_record_loses_its_secrets_once(tmp_path: Path) -> None:
    data = {"pid": 7, "started": 100.0, "state": "waiting", "token": "t", "password": "p"}
    assert record.gone_record(data, 8, 100.0, 5.0) is None  # another process's
    assert record.gone_record(data, 7, 200.0, 5.0) is None  # a reused pid
    gone = record.gone_record(data, 7, 100.0, 5.0)
    assert gone == {**data, "token": None, "password": None, "process_gone_at": 5.0}
    assert record.gone_record(gone, 7, 100.0, 6.0) is None  # already marked
    path = record.write_session(tmp_path, data)
    assert record.mark_gone(path, 7, 100.0, 5.0)
    assert not record.mark_gone(path, 7, 100.0, 6.0)
    text = path.read_text()
    assert '"t"' not in text and '"p"' not in text
    assert json.loads(text)["state"] == "waiting"
    assert not record.mark_gone(tmp_path / "missing" / "session.json", 7, 100.0, 5.0)
    assert not (tmp_path / "missing").exists()


SERVING = record.SessionRecord(
    state=Phase.WAITING, task="m.fit", error="ValueError: x", attempt=1, workspace="/src",
    config_root="/src", control_url="http://0.0.0.0:8081", token="tok", debug_host="0.0.0.0",
    debug_port=5678, code_server_url="http://0.0.0.0:8080/", password="pw", inputs="/in",
    last_activity=12.5, pid=7, started=100.0, session="7-100-2",
)
ENDED = record.SessionRecord(state=Phase.DONE, task="m.fit", error=None, workspace="/src",
                             pid=7, started=100.0, session="7-100")
PLACEHOLDER = record.SessionRecord(state=Phase.RUNNING, rank={"rank": 1, "world_size": 2,
                                   "local_rank": 1, "local_world_size": 2}, pid=7, started=100.0)


def test_each_kind_of_record_is_written_with_the_keys_it_always_had() -> None:
    assert SERVING.to_json() == {
        "state": "waiting", "task": "m.fit", "error": "ValueError: x", "attempt": 1,
        "workspace": "/src", "config_root": "/src", "control_url": "http://0.0.0.0:8081",
        "token": "tok", "debug": {"host": "0.0.0.0", "port": 5678},
        "code_server_url": "http://0.0.0.0:8080/", "password": "pw", "pid": 7, "started": 100.0,
        "inputs": "/in", "last_activity": 12.5, "session": "7-100-2",
    }
    ranked = replace(SERVING, rank=PLACEHOLDER.rank, leader=False).to_json()
    assert ranked["rank"] == PLACEHOLDER.rank and ranked["leader"] is False
    assert ENDED.to_json() == {"state": "done", "task": "m.fit", "error": None,
                               "workspace": "/src", "pid": 7, "started": 100.0,
                               "session": "7-100"}
    assert PLACEHOLDER.to_json() == {"state": "running", "rank": PLACEHOLDER.rank, "pid": 7,
                                     "started": 100.0}


def test_a_password_is_written_only_with_an_ide_and_secrets_stay_out_of_repr() -> None:
    assert replace(SERVING, code_server_url=None).to_json()["password"] is None
    assert "tok" not in repr(SERVING) and "pw" not in repr(SERVING)


@pytest.mark.parametrize("written", [SERVING, ENDED, PLACEHOLDER], ids=["serving", "ended",
                                                                        "placeholder"])
def test_every_kind_reads_back_as_written(tmp_path: Path, written: record.SessionRecord) -> None:
    path = record.write_session(tmp_path, written.to_json())
    read = record.SessionRecord.load(path)
    assert read == written and read.to_json() == written.to_json()
    assert read.phase is written.state and read.serving is (written is SERVING)


def test_reading_checks_what_talking_to_a_session_needs() -> None:
    with pytest.raises(record.RecordError, match="^x is not a JSON object$"):
        record.SessionRecord.from_json([], "x")
    with pytest.raises(record.RecordError,
                       match="^x has no control_url: is the session still starting"):
        record.SessionRecord.from_json(ENDED.to_json(), "x")
    with pytest.raises(record.RecordError, match="^x has no token"):
        record.SessionRecord.from_json({"control_url": "http://127.0.0.1:1"}, "x")
    odd = record.SessionRecord.from_json(
        {"control_url": "http://h:1", "token": "t", "debug": {"host": 3},
         "leader": "yes", "state": ""}, "x")
    assert (odd.pid, odd.started, odd.debug, odd.leader, odd.state) == (
        None, None, None, None, "unknown")
    assert odd.phase is None and not odd.ended
    for damage, words in [({"pid": True}, "pid True is not a process id"),
                          ({"started": "soon"}, "started 'soon' is not a finite number"),
                          ({"debug": {"port": "5678"}}, "debug.port '5678' is not a port")]:
        with pytest.raises(record.RecordError, match=f"^record x is damaged: {words}$"):
            record.SessionRecord.from_json({"control_url": "http://h:1", "token": "t",
                                            **damage}, "x")


def test_one_session_path() -> None:
    assert record.session_path(Path("/h")) == Path("/h/session.json")
    assert record.session_path(environ={"PODCODE_HOME": "/elsewhere"}) == Path(
        "/elsewhere/session.json")


def test_sessions_of_one_process_get_their_own_ids_and_know_of_each_other() -> None:
    from interactive.base.identity import claim_session_id, others_open, release_session_id

    first = claim_session_id()
    second = claim_session_id()
    try:
        assert first == own_session_id() and second == f"{first}-2"
        assert others_open(first) and others_open(second)  # a reap keeps the pod for the other
        release_session_id(second)
        assert not others_open(first)  # alone: its cleanup may delete the pod
        assert claim_session_id() == second  # the name is given again
    finally:
        release_session_id(first)
        release_session_id(second)


def test_a_jupyterlab_session_says_so_and_reads_back() -> None:
    jupyter = replace(SERVING, ide="jupyter")
    assert jupyter.to_json()["ide"] == "jupyter"
    assert record.SessionRecord.from_json(jupyter.to_json(), "session.json").ide == "jupyter"
    assert "ide" not in replace(jupyter, code_server_url=None).to_json()
