"""A session's steps (``runner.session_steps``) dispatch every command the waiting task
receives, each on its own."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interactive.base.errors import Reaped
from interactive.base.phases import CommandKind, Phase
from interactive.base.settings import build_settings
from interactive.base.types import ExcInfo, TaskRef
from interactive.session import core
from interactive.session.core import Command
from interactive.task import preempt, runner, steps
from tests import sigterm_state
from tests.sigterm_state import failure


def debug_session(call: runner.Call, excinfo: ExcInfo | None, on_open: Any = None) -> Any:
    """A session served on this thread until the task succeeds, or abort/reap/preemption."""
    return steps.run(runner.session_steps(call, excinfo, on_open))


class FakeSession:
    """What a session's steps ask of a session, with the commands scripted by the test."""

    made: list[FakeSession] = []
    script: list[Command] = []

    def __init__(self, task: TaskRef, settings: Any, workspace: Path) -> None:
        self.commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        for command in self.script:
            self.commands.put(command)
        self.calls: list[str] = []
        self.closed: list[Phase] = []
        self.capture = None
        self.home = workspace
        self.state = type("State", (), {"attempt": 1})()
        FakeSession.made.append(self)

    def open(self, *args: Any) -> None:
        self.calls.append("open")

    def wait(self) -> Command:
        return self.commands.get_nowait()  # an empty script is a test error, not a hang

    def running(self) -> None:
        self.calls.append("running")

    def reopen(self, excinfo: ExcInfo) -> None:
        self.calls.append(f"reopen {excinfo[0].__name__}")

    def deliver_fix(self) -> None:
        self.calls.append("deliver_fix")

    def save_edits(self) -> str | None:
        self.calls.append("save_edits")
        return None

    def close(self, final: Phase) -> None:
        self.closed.append(final)


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeSession]]:
    monkeypatch.setattr(core, "Session", FakeSession)
    FakeSession.made, FakeSession.script = [], []
    yield FakeSession
    sigterm_state.reset()


def call(fn: Any, **settings: Any) -> runner.Call:
    ref = TaskRef("tests.job", "tests", "job", None)
    return runner.Call(fn, ref, build_settings({"workspace": ".", **settings}), (2,), {})


def test_resume_runs_the_task_again_and_returns_its_value(session: type[FakeSession]) -> None:
    session.script = [Command(CommandKind.RESUME)]
    assert debug_session(call(lambda x: x * 21), failure()) == 42
    [made] = session.made
    assert made.calls == ["open", "running", "deliver_fix"] and made.closed == [Phase.DONE]


def test_a_resume_that_fails_again_reopens_the_session(session: type[FakeSession]) -> None:
    attempts: list[int] = []

    def flaky(x: int) -> int:
        attempts.append(x)
        if len(attempts) == 1:
            raise KeyError("again")
        return x

    session.script = [Command(CommandKind.RESUME), Command(CommandKind.RESUME)]
    assert debug_session(call(flaky), failure()) == 2
    [made] = session.made
    assert made.calls == ["open", "running", "reopen KeyError", "running", "deliver_fix"]


def test_abort_raises_the_original_exception(session: type[FakeSession]) -> None:
    session.script = [Command(CommandKind.ABORT)]
    with pytest.raises(ValueError, match="first failure"):
        debug_session(call(lambda x: x), failure())
    assert session.made[0].closed == [Phase.FAILED]


def test_reaped_raises_reaped_with_where_the_edits_went(session: type[FakeSession]) -> None:
    session.script = [Command(CommandKind.REAPED, "file:///store/edits/1.patch")]
    with pytest.raises(Reaped, match="cleaned up after being idle") as raised:
        debug_session(call(lambda x: x), failure())
    assert raised.value.saved_edits == "file:///store/edits/1.patch"
    assert isinstance(raised.value.__cause__, ValueError)
    assert session.made[0].closed == [Phase.FAILED]


def test_preempted_runs_the_hooks_saves_the_edits_and_exits_143(
    session: type[FakeSession],
) -> None:
    hooks: list[str] = []
    session.script = [Command(CommandKind.PREEMPTED)]
    task = call(lambda x: x, on_preempt=lambda: hooks.append("on_preempt"))
    with pytest.raises(SystemExit) as raised:
        debug_session(task, failure())
    assert raised.value.code == 143 == preempt.exit_status()
    assert hooks == ["on_preempt"]
    [made] = session.made
    assert made.calls == ["open", "save_edits"] and made.closed == [Phase.FAILED]


@pytest.mark.parametrize("at", ["on_open", "checkpoints", "wait"])
def test_an_interrupt_once_the_session_waits_saves_the_edits(
    session: type[FakeSession], monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    """Ctrl-C or ``ray.cancel`` (a KeyboardInterrupt in the waiting thread) may come the
    moment the session says it waits, before the runner waits on it: an edit made by then
    is saved wherever it lands."""
    def interrupt(*_: Any) -> Any:
        raise KeyboardInterrupt

    on_open = interrupt if at == "on_open" else None
    if at == "checkpoints":
        monkeypatch.setattr(runner, "_sync_checkpoints", interrupt)
    if at == "wait":
        monkeypatch.setattr(FakeSession, "wait", interrupt)
    with pytest.raises(KeyboardInterrupt):
        debug_session(call(lambda x: x), failure(), on_open)
    [made] = session.made
    assert made.calls == ["open", "save_edits"] and made.closed == [Phase.FAILED]


def test_every_command_kind_has_its_own_branch(session: type[FakeSession]) -> None:
    outcomes = {}
    for kind in CommandKind:
        session.script = [Command(kind)]
        try:
            outcomes[kind] = type(debug_session(call(lambda x: x), failure())).__name__
        except BaseException as exc:  # noqa: BLE001 - each kind ends its own way
            outcomes[kind] = type(exc).__name__
    assert outcomes == {CommandKind.RESUME: "int", CommandKind.ABORT: "ValueError",
                        CommandKind.REAPED: "Reaped", CommandKind.PREEMPTED: "SystemExit"}


def test_the_traceback_a_user_reads_starts_in_their_own_code() -> None:
    """The runner catches the task's exception in its own frame; what is logged and
    re-raised starts at the task's frame."""
    import os

    from interactive.base import errors

    def task() -> None:
        raise ValueError("bug")

    runner_like = compile("def call(fn):\n    try:\n        fn()\n    except ValueError as e:\n"
                          "        return e.__traceback__\n",
                          os.path.join(errors._PACKAGE, "runner_like.py"), "exec")
    space: dict[str, Any] = {}
    exec(runner_like, space)
    caught = space["call"](task)
    assert caught.tb_frame.f_code.co_filename.endswith("runner_like.py")
    trimmed = errors.from_the_task(caught)
    assert trimmed is not None and trimmed.tb_frame.f_code.co_name == "task"
    assert errors.from_the_task(None) is None
