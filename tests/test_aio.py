"""A coroutine's session (``task/aio``): every step that may block runs off the event loop,
so the program's other coroutines go on while a session opens, resumes and closes; only
the patch runs on the loop."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interactive.base.phases import CommandKind, Phase
from interactive.base.settings import build_settings
from interactive.base.types import ExcInfo, TaskRef
from interactive.distributed import collective
from interactive.session import core
from interactive.session.core import Command
from interactive.task import aio, runner
from tests import sigterm_state
from tests.sigterm_state import failure

BOUND_SECONDS = 20.0
"""How long a blocking step waits for the loop to tick before it says the loop is stuck."""


class Where:
    """Which thread each step ran on, and a gate the loop's ticker opens."""

    def __init__(self) -> None:
        self.loop_thread: threading.Thread | None = None
        self.seen: dict[str, bool] = {}
        """step -> whether it ran on the loop's thread."""
        self.ticked = threading.Event()

    def note(self, step: str) -> None:
        self.seen[step] = threading.current_thread() is self.loop_thread

    def wait_for_the_loop(self, step: str) -> None:
        """Block as a slow step does, until the loop ticked meanwhile."""
        self.note(step)
        self.ticked.clear()
        if not self.ticked.wait(BOUND_SECONDS):
            raise RuntimeError(f"the loop did not tick while {step} ran")


WHERE = Where()


class Plan:
    patched = ["job.fix"]

    def apply(self) -> None:
        WHERE.note("patch")

    def summary(self) -> str:
        return "patched job.fix"


class Planned:
    plan = Plan()
    base = None


class SlowSession:
    """A session whose steps block (as writing records, loading inputs, joining ranks do)."""

    made: list[SlowSession] = []

    def __init__(self, task: TaskRef, settings: Any, workspace: Path) -> None:
        self.commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self.commands.put(Command(CommandKind.RESUME, Planned()))
        self.commands.put(Command(CommandKind.RESUME, Planned()))
        self.capture = None
        self.state = type("State", (), {"attempt": 1})()
        self.closed: list[Phase] = []
        SlowSession.made.append(self)

    def open(self, *args: Any) -> None:
        WHERE.note("open")

    def wait(self) -> Command:
        WHERE.note("wait")
        return self.commands.get_nowait()

    def running(self) -> None:
        WHERE.wait_for_the_loop("running")

    def patched(self, planned: Any) -> None:
        WHERE.note("patched")

    def reopen(self, excinfo: ExcInfo) -> None:
        WHERE.wait_for_the_loop("reopen")

    def deliver_fix(self) -> None:
        WHERE.wait_for_the_loop("deliver_fix")

    def save_edits(self) -> str | None:
        return None

    def close(self, final: Phase) -> None:
        WHERE.note("close")
        self.closed.append(final)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Iterator[Where]:
    global WHERE
    WHERE = Where()
    SlowSession.made = []
    monkeypatch.setattr(core, "Session", SlowSession)
    monkeypatch.setattr(collective, "reform_group", lambda: WHERE.wait_for_the_loop("reform"))
    monkeypatch.setattr(collective, "abort_group", lambda error: WHERE.note("abort_group"))
    yield WHERE
    sigterm_state.reset()


async def _serve_with_a_ticker(where: Where, fn: Any) -> tuple[Any, int]:
    where.loop_thread = threading.current_thread()
    ref = TaskRef("tests.job", "tests", "job", None)
    call = runner.Call(fn, ref, build_settings({"workspace": "."}), (2,), {})
    stop, ticks = asyncio.Event(), 0

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            where.ticked.set()
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(ticker())
    try:
        value = await aio.run(runner.session_steps(call, failure()))
    finally:
        stop.set()
        await ticking
    return value, ticks


def test_a_coroutine_resumes_with_only_the_patch_on_its_loop(slow: Where) -> None:
    attempts: list[int] = []

    async def flaky(x: int) -> int:
        attempts.append(x)
        if len(attempts) == 1:
            raise KeyError("again")  # fails once after the first resume: reopened
        return x * 21

    value, ticks = asyncio.run(_serve_with_a_ticker(slow, flaky))

    assert value == 42 and attempts == [2, 2]
    [made] = SlowSession.made
    assert made.closed == [Phase.DONE]
    on_loop = {step for step, there in slow.seen.items() if there}
    assert on_loop == {"patch", "patched"}, slow.seen
    assert {"open", "wait", "running", "reform", "abort_group", "reopen", "deliver_fix",
            "close"} <= set(slow.seen)
    assert ticks > 0
