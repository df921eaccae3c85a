"""SIGTERM handling in this process: state, wakers, chaining, and bounded hooks."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
from types import FrameType
from typing import Any

import pytest

from interactive.task import preempt
from tests import sigterm_state
from tests.sigterm_state import sigterm_restored  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("sigterm_restored")


def test_alive_until_sigterm() -> None:
    preempt.install()
    assert preempt.check_alive()
    assert preempt.terminated_at() is None
    signal.raise_signal(signal.SIGTERM)
    assert not preempt.check_alive()
    assert preempt.terminated_at() is not None


def test_exit_status_is_the_sigterm_convention() -> None:
    assert preempt.exit_status() == 143


def test_wakers_are_called_and_can_unregister() -> None:
    preempt.install()
    woken: queue.SimpleQueue[str] = queue.SimpleQueue()
    preempt.on_terminate(lambda: woken.put("first"))
    unregister = preempt.on_terminate(lambda: woken.put("second"))
    unregister()
    signal.raise_signal(signal.SIGTERM)
    assert woken.get_nowait() == "first"
    assert woken.empty()


def test_a_waker_registered_late_is_called_at_once() -> None:
    preempt.install()
    signal.raise_signal(signal.SIGTERM)
    woken: list[bool] = []
    preempt.on_terminate(lambda: woken.append(True))
    assert woken == [True]


def test_a_broken_waker_does_not_stop_the_others() -> None:
    preempt.install()
    woken: list[str] = []

    def broken() -> None:
        raise RuntimeError("waker bug")

    preempt.on_terminate(broken)
    preempt.on_terminate(lambda: woken.append("ok"))
    signal.raise_signal(signal.SIGTERM)
    assert woken == ["ok"]


async def test_wakes_an_asyncio_loop() -> None:
    preempt.install()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    unregister = preempt.on_terminate(lambda: loop.call_soon_threadsafe(stop.set))
    try:
        loop.call_soon(signal.raise_signal, signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), timeout=30)
    finally:
        unregister()
    assert not preempt.check_alive()


def test_wakes_a_thread_blocked_on_a_queue() -> None:
    preempt.install()
    commands: queue.SimpleQueue[str] = queue.SimpleQueue()
    preempt.on_terminate(lambda: commands.put("preempted"))
    threading.Timer(
        0.05, lambda: signal.pthread_kill(threading.main_thread().ident or 0, 15)
    ).start()
    assert commands.get(timeout=30) == "preempted"


def test_previous_python_handler_is_chained_once() -> None:
    calls: list[int] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        calls.append(signum)
        assert not preempt.check_alive()  # podcode recorded the signal first

    signal.signal(signal.SIGTERM, previous)
    preempt.install()
    preempt.install()
    signal.raise_signal(signal.SIGTERM)
    assert calls == [signal.SIGTERM]


def test_uninstall_restores_the_previous_handler() -> None:
    def previous(signum: int, frame: FrameType | None) -> None: ...

    signal.signal(signal.SIGTERM, previous)
    preempt.install()
    assert signal.getsignal(signal.SIGTERM) is not previous
    sigterm_state.uninstall()
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_forked_child_lets_the_wakeup_pipe_go() -> None:
    """A DataLoader's worker (forked) that is sent SIGTERM must not preempt its parent:
    the child's signals are not written to the parent's pipe."""
    signal.set_wakeup_fd(-1)
    preempt.install()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its wakeup fd, end at once
        os.write(write, str(signal.set_wakeup_fd(-1)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 32) == b"-1"
    os.close(read)
    ours = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(ours)
    assert ours != -1  # the parent's stays


def test_install_outside_the_main_thread_does_nothing() -> None:
    before = signal.getsignal(signal.SIGTERM)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            preempt.install()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert errors == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_task_ended_off_the_main_thread_makes_the_main_thread_exit_143() -> None:
    """After SIGTERM, a task's thread that is done tells the main thread, blocked in
    ``join()``, to raise ``SystemExit(143)`` there: the process does not go on."""
    preempt.install()
    signal.raise_signal(signal.SIGTERM)
    worker = threading.Thread(target=preempt.end_process)
    with pytest.raises(SystemExit) as info:
        worker.start()
        worker.join()
    worker.join()
    assert info.value.code == 143


def test_end_process_does_nothing_while_alive() -> None:
    preempt.install()
    worker = threading.Thread(target=preempt.end_process)
    worker.start()
    worker.join()
    assert preempt.check_alive()
    signal.raise_signal(signal.SIGTERM)  # an ordinary SIGTERM: recorded, nothing raised
    assert not preempt.check_alive()


# -- hooks --------------------------------------------------------------------------------


def test_hooks_run_in_order_and_errors_name_the_hook() -> None:
    ran: list[str] = []

    def save() -> None:
        ran.append("save")

    def upload() -> None:
        ran.append("upload")
        raise OSError("bucket gone")

    def notify() -> None:
        ran.append("notify")

    errors = preempt.run_hooks([save, upload, notify], deadline_seconds=30)
    assert ran == ["save", "upload", "notify"]
    assert len(errors) == 1
    assert "upload" in errors[0] and "OSError: bucket gone" in errors[0]


def test_hooks_may_raise_anything_even_system_exit() -> None:
    def leave() -> None:
        raise SystemExit(3)

    errors = preempt.run_hooks([leave], deadline_seconds=30)
    assert errors and "SystemExit" in errors[0]


def test_a_hook_still_running_at_the_deadline_is_abandoned() -> None:
    release = threading.Event()
    ran: list[str] = []

    def stuck() -> None:
        release.wait(60)

    def after() -> None:
        ran.append("after")

    try:
        errors = preempt.run_hooks([stuck, after], deadline_seconds=0.2)
    finally:
        release.set()
    assert ran == []
    assert "stuck" in errors[0] and "abandoned" in errors[0]
    assert "after" in errors[1] and "not run" in errors[1]


def test_hooks_see_the_current_task() -> None:
    from interactive.base.context import current_task
    from interactive.storage.checkpoint import checkpoint_dir

    folders: list[object] = []
    token = current_task.set("m.train")
    try:
        errors = preempt.run_hooks([lambda: folders.append(checkpoint_dir())], 30)
    finally:
        current_task.reset(token)
    assert errors == []
    assert getattr(folders[0], "name", None) == "m.train"


def test_no_hooks_no_errors() -> None:
    assert preempt.run_hooks([], deadline_seconds=1) == []


def test_hook_name_is_qualified() -> None:
    def save() -> Any: ...

    assert preempt.hook_name(save).endswith("test_hook_name_is_qualified.<locals>.save")


def test_leave_runs_hooks_then_after_then_exits_143() -> None:
    preempt.install()
    signal.raise_signal(signal.SIGTERM)
    ran: list[str] = []

    def broken_sync() -> None:
        ran.append("sync")
        raise OSError("store unreachable")

    with pytest.raises(SystemExit) as info:
        preempt.leave([lambda: ran.append("hook")], 30, after=broken_sync)
    assert info.value.code == 143
    assert ran == ["hook", "sync"]


def test_a_huge_deadline_never_overflows_and_the_edits_are_saved() -> None:
    """A deadline beyond what a thread can wait for (the setting is bounded, but nothing
    on the way out may raise) still runs the hooks and then saves."""
    from interactive.task import preempt as module

    ran: list[str] = []
    assert module.run_hooks([lambda: ran.append("hook")], 1e300) == []
    with pytest.raises(SystemExit):
        module.leave([lambda: ran.append("again")], float("inf"),
                     after=lambda: ran.append("edits saved"))
    assert ran == ["hook", "again", "edits saved"]
