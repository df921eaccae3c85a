"""The task layer's state put back between tests (a test's SIGTERM must not reach the next
test, and the handler the test found is restored), and a first failure to hand a session."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator

import pytest

from interactive.base.types import ExcInfo
from interactive.task import preempt, wakeup


def flush_signals(timeout: float = 30) -> None:
    """Until the signals written to podcode's wakeup pipe so far have been passed on."""
    fds = wakeup._fds
    if fds is None:
        return
    wakeup._passed.clear()
    import os

    os.write(fds[1], bytes([wakeup._MARK]))
    wakeup._passed.wait(timeout)


def reset() -> None:
    """Forget the SIGTERM (and the wakers); the handler stays as it is."""
    flush_signals()
    state = preempt._state
    state.terminated_at = None
    state.wakers.clear()
    state.leaving = None
    state.status_ours = state.main_told = state.raise_in_main = False


def uninstall() -> None:
    """Give SIGTERM back to the handler that was there before ``preempt.install()``."""
    state = preempt._state
    if threading.current_thread() is not threading.main_thread() or not state.installed:
        return
    if signal.getsignal(signal.SIGTERM) is preempt._handle:
        previous = state.previous
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    state.installed = False
    state.idle_default = False
    state.previous = None


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    """Around a test: SIGTERM's handler and podcode's SIGTERM state as they were."""
    before = signal.getsignal(signal.SIGTERM)
    reset()
    yield
    uninstall()
    signal.signal(signal.SIGTERM, before)
    reset()


def failure() -> ExcInfo:
    """A task's first failure, as the runner hands it to a session."""
    try:
        raise ValueError("first failure")
    except ValueError:
        return sys.exc_info()  # type: ignore[return-value]
