"""The monitor loop with a fake clock, fake samplers, a fake pod and a fake notifier."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from interactive.base.settings import IdleSettings, MailSettings, build_settings
from interactive.base.smtp import parse_smtp_url
from interactive.base.state import SessionState
from interactive.reaper.activity import CpuSampler, FileSampler, GpuSampler
from interactive.reaper.idle import Sample
from interactive.reaper.monitor import MonitorDeps, default_deps, keepalive, run_monitor
from interactive.reaper.notify import EmailNotifier
from tests.reaper_fakes import FakeNotifier, FakePod
from tests.smtp_fixture import SmtpServer

SETTINGS = build_settings(
    {"max_idle_seconds": 100, "grace_seconds": 30, "poll_seconds": 10}, {}
).idle


class FakeClock:
    """Time moves only when the monitor sleeps; scripted events happen on the way."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.events: list[tuple[float, Callable[[], None]]] = []
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], None]) -> None:
        self.events.append((when, action))
        self.events.sort(key=lambda event: event[0])

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        target = self.now + seconds
        while self.events and self.events[0][0] <= target:
            when, action = self.events.pop(0)
            self.now = max(self.now, when)
            action()
        self.now = target
        await asyncio.sleep(0)


@dataclass
class ScriptedSampler:
    """Active during the given [start, end) windows."""

    source: str = "files"
    windows: list[tuple[float, float]] = field(default_factory=list)
    value: float | None = None
    closed: bool = False

    def sample(self, now: float) -> Sample:
        active = any(start <= now < end for start, end in self.windows)
        return Sample(self.source, active, self.value, "scripted" if active else "")

    def close(self) -> None:
        self.closed = True


class BrokenSampler:
    def __init__(self) -> None:
        self.calls = 0

    def sample(self, now: float) -> Sample:
        self.calls += 1
        raise RuntimeError("sensor fell off")


@dataclass
class Harness:
    clock: FakeClock
    state: SessionState
    pod: FakePod
    notifier: FakeNotifier
    sampler: ScriptedSampler
    reaped_at: list[float] = field(default_factory=list)

    def deps(self, *extra: Any) -> MonitorDeps:
        return MonitorDeps([self.sampler, *extra], self.clock, self.clock.sleep, self.notifier,
                           self.pod)

    async def run(self, settings: IdleSettings = SETTINGS, *extra: Any) -> None:
        async def on_reap() -> None:
            self.reaped_at.append(self.clock())

        await asyncio.wait_for(run_monitor(self.state, settings, self.deps(*extra),
                                           on_reap=on_reap), 30)


@pytest.fixture
def harness() -> Harness:
    clock = FakeClock()
    state = SessionState("train.fit", clock=clock)
    state.set(state="waiting")
    return Harness(clock, state, FakePod(), FakeNotifier(), ScriptedSampler())


async def test_idle_session_is_warned_then_reaped(harness: Harness) -> None:
    seen: list[tuple[str, float | None]] = []
    harness.clock.at(1110.0, lambda: seen.append((harness.state.state, harness.state.reap_at)))

    await harness.run()

    assert seen == [("warned", 1130.0)]
    assert harness.reaped_at == [1130.0]  # exactly at the deadline, not at the next poll
    assert harness.state.state == "reaping"
    [mail] = harness.notifier.warnings
    assert (mail.idle_since, mail.sent_at, mail.reap_at) == (1000.0, 1100.0, 1130.0)
    assert mail.pod == "ml/train-abc" and mail.task == "train.fit"
    assert mail.keepalive_command == "podcode keepalive train-abc -n ml"
    calls = harness.pod.calls
    assert calls[:2] == [("idle", 1000.0, 1130.0), ("state", "warned")]
    assert calls[2][:2] == ("event", "PodcodeIdleWarning")
    assert "podcode keepalive train-abc -n ml" in calls[2][2]
    assert calls[-1] == ("state", "reaping")
    assert harness.sampler.closed


async def test_activity_after_the_warning_cancels_it(harness: Harness) -> None:
    harness.sampler.windows = [(1115.0, 1121.0)]  # seen by the poll at 1120
    states: list[str] = []
    harness.clock.at(1125.0, lambda: states.append(harness.state.state))

    await harness.run()

    assert states == ["waiting"]
    assert harness.state.reap_at is None or harness.reaped_at
    # active last at the 1120 poll: warned again at 1220, reaped at 1250
    assert harness.reaped_at == [1250.0]
    assert [m.sent_at for m in harness.notifier.warnings] == [1100.0, 1220.0]
    assert ("idle", None, None) in harness.pod.calls
    assert ("state", "waiting") in harness.pod.calls


async def test_keepalive_during_the_warning_cancels_it_and_postpones(harness: Harness) -> None:
    answers: list[float] = []

    def keep() -> None:
        answers.append(keepalive(harness.state, SETTINGS, 500))

    harness.clock.at(1110.0, keep)

    await harness.run()

    assert answers == [1110.0 + 500 + 30]
    assert harness.reaped_at == answers  # the promised time holds
    assert [m.sent_at for m in harness.notifier.warnings] == [1100.0, 1610.0]


async def test_keepalive_before_the_warning_postpones_it(harness: Harness) -> None:
    def keep() -> None:
        keepalive(harness.state, SETTINGS, 1000)

    harness.clock.at(1050.0, keep)

    await harness.run()

    assert [m.sent_at for m in harness.notifier.warnings] == [2050.0]
    assert harness.reaped_at == [2080.0]


async def test_a_running_task_is_activity(harness: Harness) -> None:
    harness.state.set(state="resuming")
    harness.state.set(state="running")

    def fails_again() -> None:  # as the session does when the resumed task fails
        harness.state.set(state="waiting")
        harness.state.touch()

    harness.clock.at(1500.0, fails_again)

    await harness.run()

    assert harness.notifier.warnings[0].idle_since == 1500.0
    assert harness.reaped_at == [1630.0]


async def test_monitor_returns_when_the_session_is_over(harness: Harness) -> None:
    harness.clock.at(1050.0, lambda: harness.state.set(state="done"))

    await harness.run()

    assert harness.reaped_at == []
    assert harness.notifier.warnings == []


async def test_gpu_reading_is_shown_in_the_status(harness: Harness) -> None:
    gpu = ScriptedSampler(source="gpu", value=3.0)
    harness.clock.at(1010.0, lambda: harness.state.set(state="done"))

    await harness.run(SETTINGS, gpu)

    assert harness.state.status()["gpu_utilization"] == 3.0


async def test_failures_are_logged_and_the_monitor_goes_on(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    broken = BrokenSampler()
    harness.pod.broken = True
    caplog.set_level(logging.ERROR, logger="interactive.reaper.monitor")

    await harness.run(SETTINGS, broken)

    assert harness.reaped_at == [1130.0]
    assert broken.calls > 5
    assert len([r for r in caplog.records if "BrokenSampler failed" in r.getMessage()]) == 1
    assert any("pod.set_idle failed" in r.getMessage() for r in caplog.records)
    assert len(harness.notifier.warnings) == 1


async def test_a_failing_cleanup_is_logged(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    async def on_reap() -> None:
        raise RuntimeError("boom")

    deps = harness.deps()
    await asyncio.wait_for(run_monitor(harness.state, SETTINGS, deps, on_reap=on_reap), 30)

    assert any("cleanup failed" in r.getMessage() for r in caplog.records)


async def test_cancelling_the_monitor_closes_the_samplers(harness: Harness) -> None:
    task = asyncio.create_task(harness.run())
    while harness.clock.now < 1050.0:
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if harness.sampler.closed:
            break
        await asyncio.sleep(0.01)
    assert harness.sampler.closed


async def test_warning_email_through_a_real_smtp_server(
    harness: Harness, smtp_server: SmtpServer
) -> None:
    notifier = EmailNotifier(parse_smtp_url(smtp_server.url), "podcode@pod", "ana@example.com")
    deps = MonitorDeps([harness.sampler], harness.clock, harness.clock.sleep, notifier, harness.pod)

    async def on_reap() -> None:
        await asyncio.to_thread(smtp_server.wait_for, 1)

    await asyncio.wait_for(run_monitor(harness.state, SETTINGS, deps, on_reap=on_reap), 30)

    [message] = smtp_server.messages
    assert message["To"] == "ana@example.com"
    body = message.get_body(("plain",))
    assert body is not None
    assert "podcode keepalive train-abc -n ml" in body.get_content()


def test_default_deps_outside_kubernetes(tmp_path: Path) -> None:
    state = SessionState("t")
    deps = default_deps(SETTINGS, state, mail=MailSettings(), workspace=tmp_path, pod=None,
                        ide_pids=list, environ={})
    kinds = [type(sampler) for sampler in deps.samplers]
    assert kinds == [FileSampler, CpuSampler, GpuSampler]
    cpu = deps.samplers[1]
    assert isinstance(cpu, CpuSampler) and cpu.scope == "tree"
    assert deps.notifier is None
    assert any("No owner" in note for note in state.notes)
    assert deps.clock is state.clock


def test_default_deps_in_a_pod(tmp_path: Path) -> None:
    state = SessionState("t")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "PODCODE_SMTP_URL": "smtp://mail:25"}
    deps = default_deps(SETTINGS, state, mail=MailSettings(), workspace=tmp_path, pod=FakePod(),
                        ide_pids=list, environ=environ)
    cpu = deps.samplers[1]
    assert isinstance(cpu, CpuSampler) and cpu.scope == "user"
    assert isinstance(deps.notifier, EmailNotifier)
    assert deps.notifier.owner == "pod-owner@example.com"  # from the pod annotation
    assert state.owner == "pod-owner@example.com"


def test_default_deps_in_a_ray_pod_count_only_the_tasks_own_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ray node's pod runs its raylet and other workers: their CPU is not the session's."""
    from interactive.base import identity

    monkeypatch.setattr(identity, "_pod_shared_with", [])
    identity.share_pod("a Ray node")
    deps = default_deps(SETTINGS, SessionState("t"), mail=MailSettings(), workspace=tmp_path,
                        pod=FakePod(), ide_pids=list,
                        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    cpu = deps.samplers[1]
    assert isinstance(cpu, CpuSampler) and cpu.scope == "tree"
