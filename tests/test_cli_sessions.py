"""Several sessions in one home or one pod: found, listed, chosen with --task/--pid; a
session whose process is gone is shown as such and never reached."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interactive.base.sessionfile import Found, find_local, unique
from interactive.cli import Console, Exit, run
from interactive.cli.choose import SessionGone, choose, how_to_choose, usable
from interactive.cli.errors import CliError
from tests.cli_fixture import NOW, LiveSession, errors, output
from tests.fake_kube import FakeKube


def found(pid: int, task: str, state: str = "waiting", running: bool | None = True,
          **extra: Any) -> Found:
    data = {"pid": pid, "started": float(pid), "task": task, "state": state,
            "control_url": "http://127.0.0.1:1", "token": "t", **extra}
    return Found(f"record-{pid}", data, running)


def test_one_open_session_needs_no_selector() -> None:
    one = found(1, "jobs.train")
    assert choose([one, found(2, "jobs.eval", "done")], None, None, "home") is one


def test_several_open_sessions_need_a_selector() -> None:
    train, evaluate = found(1, "jobs.train"), found(2, "jobs.eval")
    with pytest.raises(CliError) as raised:
        choose([train, evaluate], None, None, "/h")
    assert raised.value.code == Exit.USAGE
    assert str(raised.value) == (
        "2 sessions wait in /h: choose one with --task TASK or --pid PID "
        "(pid 1 jobs.train (waiting); pid 2 jobs.eval (waiting))")
    assert choose([train, evaluate], "eval", None, "/h") is evaluate
    assert choose([train, evaluate], "jobs.train", None, "/h") is train
    assert choose([train, evaluate], None, 2, "/h") is evaluate
    with pytest.raises(CliError, match=r"no session of task rain in /h \(sessions there: pid 1"):
        choose([train, evaluate], "rain", None, "/h")


def test_the_ranks_of_one_task_need_no_selector_their_leader_speaks_for_them() -> None:
    """A resume or an abort on one rank reaches every rank (and, over several pods, the
    job): the leading rank is chosen; ranks of two tasks, or without a leader, still ask."""
    ranks = [found(pid, "train.main", rank={"rank": pid - 1, "world_size": 2,
                                            "local_rank": pid - 1, "local_world_size": 2},
                   leader=pid == 2) for pid in (1, 2)]
    assert choose(ranks, None, None, "pod ml/train-0") is ranks[1]
    assert choose(ranks, None, 1, "pod ml/train-0") is ranks[0]  # --pid still picks one
    no_leader = [found(pid, "train.main", rank={"rank": pid - 1}, leader=False)
                 for pid in (1, 2)]
    with pytest.raises(CliError, match="2 sessions wait"):
        choose(no_leader, None, None, "pod ml/train-0")
    with pytest.raises(CliError, match="2 sessions wait"):
        choose([ranks[1], found(3, "eval.main", rank={"rank": 0}, leader=True)], None, None,
               "pod ml/train-0")


def test_sessions_of_one_task_in_one_process_are_told_apart_by_their_id() -> None:
    """A fan-out (``asyncio.gather`` of one task) fails twice in one process: two sessions,
    listed both (the home's copy of the first counts once), chosen with --session."""
    first, second = (found(1, "wf.square", session=name) for name in ("1-1", "1-1-2"))
    copies = unique([(f.where, dict(f.data)) for f in (first, second)]
                    + [("home", dict(first.data))])
    assert [where for where, _ in copies] == ["record-1", "record-1"]
    assert [data["session"] for _, data in copies] == ["1-1", "1-1-2"]
    with pytest.raises(CliError) as raised:  # --task and --pid cannot tell them apart
        choose([first, second], None, None, "/h")
    assert str(raised.value) == (
        "2 sessions wait in /h: choose one with --session ID (their ids: 1-1, 1-1-2) "
        "(pid 1 session 1-1 wf.square (waiting); pid 1 session 1-1-2 wf.square (waiting))")
    with pytest.raises(CliError, match=r"--session ID \(their ids: 1-1, 1-1-2\) \(pid 1 "):
        choose([first, second], "wf.square", 1, "/h")
    assert choose([first, second], "square", None, "/h", "1-1-2") is second
    with pytest.raises(CliError, match="no session of task square and id 1-3"):
        choose([first, second], "square", None, "/h", "1-3")


def test_only_the_flags_that_tell_the_sessions_apart_are_offered() -> None:
    one_task = [found(1, "jobs.train", session="1-1"), found(2, "jobs.train", session="2-2")]
    assert how_to_choose(one_task) == "choose one with --pid PID or --session ID"
    one_process = [found(1, "jobs.train", session="1-1"), found(1, "jobs.eval", session="1-2")]
    assert how_to_choose(one_process) == "choose one with --task TASK or --session ID"
    mixed = [found(1, "a.t"), found(1, "a.u"), found(2, "a.t")]
    assert mixed[1].data["pid"] == 1 and how_to_choose(mixed) == (
        "choose one with --task TASK and --pid PID together")


def test_without_an_open_session_the_newest_is_reported() -> None:
    dead = found(3, "jobs.train", running=False)
    done = found(2, "jobs.train", "done", running=False)
    assert choose([done, dead], None, None, "/h") is dead
    with pytest.raises(SessionGone, match="its process 3 is gone"):
        usable(dead, "local session")
    with pytest.raises(CliError, match=r"has ended \(state done"):
        usable(done, "local session")
    marked = found(4, "jobs.train", running=None, process_gone_at=NOW, token=None)
    assert marked.gone and marked.shown_state == "waiting (process gone)"


def test_each_process_counts_once_and_placeholders_not_at_all() -> None:
    own = {"pid": 1, "started": 1.0, "control_url": "http://127.0.0.1:1", "token": "t"}
    placeholder = {"pid": 2, "started": 2.0, "state": "running"}  # a rank running its task
    kept = unique([("own", own), ("home", dict(own)), ("rank", placeholder)])
    assert kept == [("own", own)]


def place(live: LiveSession, home: Path, pid: int, task: str, **extra: Any) -> dict[str, Any]:
    """Put ``live``'s record as session ``pid`` of ``home`` (as the session would)."""
    data = {**json.loads((live.home / "session.json").read_text()), "pid": pid, "task": task,
            **extra}
    folder = home / "sessions" / f"{pid}-1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "session.json").write_text(json.dumps(data))
    (folder / "session.json").chmod(0o600)
    return data


@pytest.fixture
def two(tmp_path: Path, podcode_home: Path) -> Iterator[tuple[LiveSession, LiveSession]]:
    first, second = LiveSession(tmp_path / "first"), LiveSession(tmp_path / "second")
    place(first, podcode_home, os.getpid(), "jobs.train")
    place(second, podcode_home, os.getppid(), "jobs.eval")
    (podcode_home / "session.json").write_text((podcode_home / "sessions" /
                                                f"{os.getpid()}-1" / "session.json").read_text())
    yield first, second
    first.close()
    second.close()


@pytest.fixture
def console() -> Console:
    return Console(out=io.StringIO(), err=io.StringIO(), environ=os.environ, clock=lambda: NOW)


def test_two_local_sessions_are_listed_and_chosen(
    two: tuple[LiveSession, LiveSession], console: Console
) -> None:
    first, second = two
    assert run(["status"], console) == Exit.USAGE
    assert "2 sessions wait in" in errors(console) and "--task" in errors(console)
    assert len(errors(console).splitlines()) == 1
    assert run(["resume", "--task", "eval"], console) == Exit.OK
    assert second.controls.calls == ["resume"] and first.controls.calls == []
    assert f"podcode: resumed local session (pid {os.getppid()})" in output(console)
    assert run(["abort", "--pid", str(os.getpid())], console) == Exit.OK
    assert first.controls.calls == ["abort"]


def test_list_local_shows_every_session_without_secrets(
    two: tuple[LiveSession, LiveSession], console: Console
) -> None:
    assert run(["list", "--local"], console) == Exit.OK
    lines = output(console).splitlines()
    assert lines[0].split() == ["PID", "SESSION", "TASK", "STATE", "STARTED", "ERROR"]
    assert {line.split()[2] for line in lines[1:]} == {"jobs.train", "jobs.eval"}
    console.out = io.StringIO()  # type: ignore[misc]
    assert run(["list", "--local", "-o", "json"], console) == Exit.OK
    listed = json.loads(output(console))
    assert len(listed) == 2 and {s["process"] for s in listed} == {"running"}
    assert two[0].token not in output(console) and two[0].password not in output(console)


def test_a_session_whose_process_died_is_shown_never_reached(
    podcode_home: Path, console: Console
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = podcode_home / "sessions" / f"{dead.pid}-1"
    folder.mkdir(parents=True)
    (folder / "session.json").write_text(json.dumps({
        "state": "waiting", "task": "jobs.train", "error": "ValueError: nan", "pid": dead.pid,
        "started": 1.0, "control_url": "http://127.0.0.1:9", "token": "tok-left-behind",
        "password": "pw-left-behind", "inputs": str(folder / "inputs" / "jobs.train"),
    }))
    [gone] = find_local(podcode_home)
    assert gone.gone and gone.running is False
    assert run(["status"], console) == Exit.NOT_FOUND
    text = output(console)
    assert "waiting (process gone)" in text and f"{dead.pid}, gone" in text
    assert "left-behind" not in text + errors(console)
    assert run(["resume"], console) == Exit.NOT_FOUND
    assert f"its process {dead.pid} is gone" in errors(console)
    assert "left-behind" not in errors(console)
    console.out = io.StringIO()  # type: ignore[misc]
    assert run(["list", "--local"], console) == Exit.OK
    assert "waiting (process gone)" in output(console)


def test_two_sessions_in_a_pod_are_chosen_through_exec(
    two: tuple[LiveSession, LiveSession], fake_kube: FakeKube, podcode_home: Path,
    console: Console
) -> None:
    first, second = two
    fake_kube.session_pod("train-0", "ml", ports=first.ports, home=str(podcode_home))
    assert run(["status", "train-0", "-n", "ml"], console) == Exit.USAGE
    assert "2 sessions wait in pod ml/train-0" in errors(console)
    assert run(["keepalive", "train-0", "-n", "ml", "--task", "jobs.eval"], console) == Exit.OK
    assert second.controls.calls == [("keepalive", 3600.0)] and first.controls.calls == []
    assert f"pod ml/train-0 (pid {os.getppid()})" in output(console)
