"""The one module that reaches into pydevd: its version gate, its pace while a session
waits, and its decision at exit. The real pydevd runs in child processes only (here, and
in tests/test_prompt_exit.py): imported here it would take this process's ``breakpoint()``."""

from __future__ import annotations

import logging
import queue
import re
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from interactive.base import pydevd
from interactive.base.pydevd import IDLE_PYDEVD_SECONDS, slow_housekeeping
from tests.dap import DapClient
from tests.session_fixture import Job

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("version", "tested"),
    [("1.8.22", True), ("1.8.30", True), ("1.8.22rc1", True), ("1.8.21", False),
     ("1.9.0", False), ("2.0", False), ("1.8", False), ("", False), ("dev", False)],
)
def test_within_the_tested_versions(version: str, tested: bool) -> None:
    assert pydevd.within(version) is tested


def test_parse_version_keeps_leading_digits() -> None:
    assert pydevd.parse_version("1.8.22") == (1, 8, 22)
    assert pydevd.parse_version("1.9.0rc1") == (1, 9, 0)
    assert pydevd.parse_version("1.x.3") == (1,)


def test_a_version_outside_the_range_warns_and_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=pydevd.__name__):
        assert pydevd.check("1.9.1") is False
        assert pydevd.check("1.8.22") is True
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "debugpy 1.9.1" in warnings[0] and "1.8.22 up to 1.9" in warnings[0]


def test_outside_the_range_nothing_of_pydevd_is_touched(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Even with pydevd's modules loaded, an untested debugpy gets the public API only."""
    touched: list[str] = []

    class Loud:
        def __getattr__(self, name: str) -> Any:
            touched.append(name)
            raise AssertionError(f"pydevd's {name} touched")

    for name in ("pydevd", "_pydevd_bundle.pydevd_constants",
                 "_pydevd_bundle.pydevd_additional_thread_info",
                 "_pydevd_bundle.pydevd_thread_lifecycle"):
        monkeypatch.setitem(sys.modules, name, Loud())
    monkeypatch.setattr(pydevd, "_checked", None)
    monkeypatch.setattr(pydevd, "installed_version", lambda: "9.0.0")
    with caplog.at_level(logging.WARNING, logger=pydevd.__name__):
        assert pydevd.usable() is False
        assert pydevd.claim_ports() == []
        assert pydevd.on_new_client(lambda: None) is False
        assert pydevd.configuration_done() is None
        assert pydevd.suspended_threads() == []
        pydevd.release(threading.current_thread())
        pydevd.stop_tracing_here()
        pydevd.fast_housekeeping_while_stopped()
        with slow_housekeeping():
            pass
        assert pydevd.usable() is False
    assert touched == []
    assert len(caplog.records) == 1, "one warning per process"


def test_the_bound_in_pyproject_is_the_tested_range() -> None:
    lines = re.findall(r'^\s*"(debugpy[^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    low, high = (pydevd._dotted(v) for v in pydevd.TESTED)
    assert [line.replace(" ", "") for line in lines] == [f"debugpy>={low},<{high}"]


def test_pydevd_housekeeping_is_slowed_only_while_a_presenter_waits() -> None:
    module = SimpleNamespace(TIMEOUT_SLOW=0.2)
    with slow_housekeeping(module):
        with slow_housekeeping(module):  # a second session of the process waits too
            assert module.TIMEOUT_SLOW == IDLE_PYDEVD_SECONDS
        assert module.TIMEOUT_SLOW == IDLE_PYDEVD_SECONDS, "one presenter still waits"
    assert module.TIMEOUT_SLOW == 0.2, "pydevd's own value is back"


def test_pydevd_writer_looks_at_an_empty_queue_seldom_while_a_session_waits() -> None:
    waits: list[float | None] = []

    class Recorded(queue.Queue):  # type: ignore[type-arg]
        def get(self, block: bool = True, timeout: float | None = None) -> Any:
            waits.append(timeout)
            return super().get(block, 0.001)  # the wait itself is not what is tested

    messages = Recorded()
    debugger = SimpleNamespace(writer=SimpleNamespace(_cmd_queue=messages))
    module = SimpleNamespace(TIMEOUT_SLOW=0.2, get_global_debugger=lambda: debugger)
    with slow_housekeeping(module):
        messages.put("event")
        assert messages.get(True, 0.1) == "event"  # a message comes at once
        with pytest.raises(queue.Empty):
            messages.get(True, 0.1)
    assert waits == [IDLE_PYDEVD_SECONDS, IDLE_PYDEVD_SECONDS]
    assert "get" not in vars(messages), "the writer's own get is back"


def test_the_last_presenter_leaving_wakes_pydevd_from_its_slow_waits() -> None:
    """A wait begun at the slow pace would hold up an exit by up to 5 s: when the last
    presenter leaves, the alive check's event is set once and replaced (set for good, it
    would spin); the command thread (a daemon) is left to its pace."""
    asleep = threading.Event()
    command = threading.Event()
    alive = SimpleNamespace(_wait_event=asleep)
    debugger = SimpleNamespace(check_alive_thread=alive, _py_db_command_thread_event=command)
    module = SimpleNamespace(TIMEOUT_SLOW=0.2, get_global_debugger=lambda: debugger)
    with slow_housekeeping(module):
        with slow_housekeeping(module):
            pass
        assert not asleep.is_set(), "one presenter still waits"
    assert asleep.is_set() and not command.is_set()
    assert alive._wait_event is not asleep and not alive._wait_event.is_set()


class _FakeDebugger:
    def __init__(self) -> None:
        self.disposed: list[dict[str, Any]] = []
        self.writer = None

    def dispose_and_kill_all_pydevd_threads(self, **how: Any) -> None:
        self.disposed.append(how)


@pytest.mark.parametrize("needed", [False, True])
def test_at_exit_pydevd_ends_at_once_unless_a_session_still_waits(
    monkeypatch: pytest.MonkeyPatch, needed: bool
) -> None:
    debugger = _FakeDebugger()
    monkeypatch.setattr(pydevd, "_debugger", lambda: debugger)
    monkeypatch.setattr(pydevd, "_exit_checks", [lambda: False, lambda: needed])
    pydevd._end_at_exit()
    assert debugger.disposed == ([] if needed else [{"wait": True, "timeout": 0}])


def test_at_exit_pydevd_serves_program_threads_then_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A non-daemon thread of the program still runs when the main thread is done: the
    debugger goes on serving it, and ends as soon as it has ended."""
    debugger = _FakeDebugger()
    monkeypatch.setattr(pydevd, "_debugger", lambda: debugger)
    monkeypatch.setattr(pydevd, "_exit_checks", [])
    release = threading.Event()
    worker = threading.Thread(target=release.wait, args=(30,), daemon=False)
    worker.start()
    try:
        pydevd._end_at_exit()
        watcher = next(t for t in threading.enumerate() if t.name == "podcode-pydevd-exit")
        assert watcher.daemon and debugger.disposed == []
    finally:
        release.set()
        worker.join(30)
    watcher.join(30)
    assert debugger.disposed == [{"wait": True, "timeout": 0}]


def test_at_exit_a_failure_is_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> bool:
        raise RuntimeError("broken check")

    monkeypatch.setattr(pydevd, "_exit_checks", [broken])
    pydevd._end_at_exit()  # an error in an exit hook would only be printed


def test_thread_markers_are_set_and_put_back() -> None:
    thread = threading.Thread(target=lambda: None)
    setattr(thread, pydevd.DO_NOT_TRACE, False)
    with pydevd.hidden(thread):
        assert getattr(thread, pydevd.DO_NOT_TRACE) and getattr(thread, pydevd.UNLISTED)
    assert getattr(thread, pydevd.DO_NOT_TRACE) is False
    assert not hasattr(thread, pydevd.UNLISTED)
    assert pydevd.presenter_markers() == {pydevd.DO_NOT_TRACE: True, pydevd.MAIN_THREAD: True}


UNTESTED_JOB = """
import debugpy

debugpy.__version__ = "1.9.0"  # as an untested debugpy would say

from interactive import vscode


@vscode(port=0, control_port=0, debug_port=0, ide="none")
def train(value):
    raise ValueError(f"broken {value}")


if __name__ == "__main__":
    train(7)
"""


def test_an_untested_debugpy_still_serves_the_post_mortem(job: Job) -> None:
    """A real session with debugpy's internals left alone: one warning, a client still
    stops in the failed frame (noticed by polling), abort still ends the process."""
    job.write("job.py", UNTESTED_JOB)
    record = job.start().wait_state("waiting")
    client = DapClient(record["debug"]["host"], record["debug"]["port"])
    try:
        assert client.attach_and_stop()["description"] == "broken 7"
    finally:
        client.close()
    assert job.api("POST", "/api/abort")[0] == 202
    assert job.wait_exit(timeout=60) == 1
    output = job.output()
    assert output.count("debugpy 1.9.0 is not one podcode was tested with") == 1, output
    assert "ValueError: broken 7" in output
