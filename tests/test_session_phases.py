"""A session's phases have one owner: whoever moves it (the task's thread, a resume's, the
idle monitor's), ``session.json``, the pod's label and the status say the same phase; a
resume that overlaps another, or that the session left the waiting phases during, is
refused."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from interactive.base import record
from interactive.base.errors import ResumeConflict
from interactive.base.loop import LoopThread
from interactive.base.phases import Phase
from interactive.base.settings import build_settings
from interactive.base.threads import service_executor
from interactive.base.types import TaskRef
from interactive.reaper.idle import IdleWarning
from interactive.reaper.monitor import MonitorDeps, _Monitor
from interactive.session import core
from interactive.session.core import Session
from interactive.session.publish import Publisher
from tests.waiting import wait_until

PORTS = {"code_server": 8080, "control": 8081, "debug": 5678}


class FakePod:
    """The pod the publisher marks and labels."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.calls: list[tuple[str, str]] = []

    def mark_session(self, *, task: str, state: str, owner: str | None,
                     ports: Mapping[str, int], home: str, session: str | None = None) -> None:
        self.calls.append(("mark", state))

    def set_state(self, state: str) -> None:
        self.calls.append(("state", state))

    def end_session(self, session: str, state: str) -> None:
        self.calls.append(("end", state))


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("test-session-phases")
    yield thread
    thread.stop()


def published(tmp_path: Path, loop: LoopThread) -> tuple[Session, FakePod]:
    """A session (not opened: no servers) whose phases its publisher writes and labels."""
    settings = build_settings({"workspace": str(tmp_path)})
    session = Session(TaskRef("m.fit", "m", "fit", None), settings, tmp_path,
                      home=tmp_path / "home", peers=None)
    session.id = "s-1"
    session._publisher = Publisher(loop, home=session.home, base_home=session.base_home,
                                   leader=True, session=session.id)
    pod = FakePod()
    loop.call(session._publisher.mark_pod(pod, task="m.fit", owner=None, ports=PORTS))
    return session, pod


def agree(session: Session, pod: FakePod, home: Path) -> set[str]:
    """The phases the status, the session's record and the pod's last label say."""
    path = record.session_dir(home, session.id) / record.FILE
    written = json.loads(path.read_text())["state"] if path.exists() else "none"
    labels = [state for call, state in pod.calls if call == "state"]
    return {session.state.status()["state"], written, labels[-1] if labels else "none"}


def test_the_monitors_phases_reach_the_record_and_the_label(
    tmp_path: Path, loop: LoopThread
) -> None:
    session, pod = published(tmp_path, loop)
    session.state.move(Phase.WAITING)
    wait_until(lambda: agree(session, pod, session.base_home) == {"waiting"}, "waiting")
    deps = MonitorDeps([], session.clock, asyncio.sleep, None, None, labels_pod=False)
    executor = service_executor("podcode-test-monitor", workers=1)
    monitor = _Monitor(session.state, session.settings.idle, deps, executor)
    try:
        warning = IdleWarning(idle_since=1.0, reap_at=2.0)
        loop.call(monitor.warn(warning, 1.5))
        wait_until(lambda: agree(session, pod, session.base_home) == {"warned"}, "warned")
        loop.call(monitor.cancel())
        wait_until(lambda: agree(session, pod, session.base_home) == {"waiting"}, "back")
    finally:
        executor.shutdown()


def test_a_warning_decided_before_a_resume_is_dropped(tmp_path: Path, loop: LoopThread) -> None:
    session, pod = published(tmp_path, loop)
    session.state.move(Phase.WAITING)
    session.state.move(Phase.RESUMING)
    deps = MonitorDeps([], session.clock, asyncio.sleep, None, None, labels_pod=False)
    executor = service_executor("podcode-test-monitor", workers=1)
    try:
        monitor = _Monitor(session.state, session.settings.idle, deps, executor)
        loop.call(monitor.warn(IdleWarning(idle_since=1.0, reap_at=2.0), 1.5))
    finally:
        executor.shutdown()
    assert session.state.state is Phase.RESUMING and monitor.warning is None


class Gate:
    def __init__(self) -> None:
        self.planning, self.go_on = threading.Event(), threading.Event()

    def plan(self, *args: Any) -> Any:
        self.planning.set()
        assert self.go_on.wait(20)
        return type("Planned", (), {"plan": type("Plan", (), {"report": lambda s: {}})()})()


def test_one_resume_plans_at_a_time_and_a_session_reaped_meanwhile_is_not_resumed(
    tmp_path: Path, loop: LoopThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, _ = published(tmp_path, loop)
    session._resume_base = object()  # type: ignore[assignment]
    gate = Gate()
    monkeypatch.setattr(core, "plan_resume", gate.plan)
    session.state.move(Phase.WAITING)
    outcome: list[Any] = []

    def resume() -> None:
        try:
            outcome.append(session.resume())
        except ResumeConflict as exc:
            outcome.append(str(exc))

    first = threading.Thread(target=resume)
    first.start()
    assert gate.planning.wait(20)
    with pytest.raises(ResumeConflict, match="being planned already"):
        session.resume()
    session.state.move(Phase.REAPING)  # the monitor cleans up while the plan runs
    gate.go_on.set()
    first.join(20)
    assert outcome == ["cannot resume: the task is reaping"]
    assert session.state.state is Phase.REAPING and session.commands.empty()
