"""Retries: fresh calls with the same inputs; interrupts and exits go straight through."""

from __future__ import annotations

import signal

import pytest

from interactive.task import preempt
from interactive.task.retry import call_with_retries
from tests.sigterm_state import sigterm_restored  # noqa: F401 - a fixture


class Flaky:
    """Fails ``failures`` times with ``error``, then returns its inputs."""

    def __init__(self, failures: int, error: BaseException | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionError("transient")
        self.calls: list[tuple[tuple[object, ...], dict[str, object]]] = []

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls.append((args, dict(kwargs)))
        if len(self.calls) <= self.failures:
            raise self.error
        return ("ok", args, kwargs)


pytestmark = pytest.mark.usefixtures("sigterm_restored")


def test_fails_twice_then_succeeds() -> None:
    task = Flaky(2)
    seen: list[tuple[int, str]] = []
    result = call_with_retries(
        task, (1,), {"lr": 0.1}, 2, on_retry=lambda n, exc: seen.append((n, str(exc)))
    )
    assert result == ("ok", (1,), {"lr": 0.1})
    assert task.calls == [((1,), {"lr": 0.1})] * 3
    assert seen == [(1, "transient"), (2, "transient")]


def test_gives_up_with_the_last_exception_and_a_note() -> None:
    task = Flaky(5)
    with pytest.raises(ConnectionError) as info:
        call_with_retries(task, (), {}, 1)
    assert len(task.calls) == 2
    notes = getattr(info.value, "__notes__", [])
    if hasattr(info.value, "add_note"):
        assert any("attempt 1: ConnectionError: transient" in note for note in notes)


def test_zero_retries_is_one_call() -> None:
    task = Flaky(1)
    with pytest.raises(ConnectionError):
        call_with_retries(task, (), {}, 0)
    assert len(task.calls) == 1


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(2), GeneratorExit()])
def test_interrupts_and_exits_are_never_retried(error: BaseException) -> None:
    task = Flaky(1, error)
    with pytest.raises(type(error)):
        call_with_retries(task, (), {}, 3)
    assert len(task.calls) == 1


def test_no_retry_once_sigterm_arrived() -> None:
    preempt.install()

    def task() -> None:
        signal.raise_signal(signal.SIGTERM)
        raise RuntimeError("interrupted by the shutdown")

    calls: list[int] = []
    with pytest.raises(RuntimeError):
        call_with_retries(task, (), {}, 3, on_retry=lambda n, exc: calls.append(n))
    assert calls == []


def test_backoff_doubles_with_an_injected_sleep() -> None:
    slept: list[float] = []
    call_with_retries(Flaky(3), (), {}, 3, backoff_seconds=1.5, sleep=slept.append)
    assert slept == [1.5, 3.0, 6.0]


def test_negative_retries_is_an_error() -> None:
    with pytest.raises(ValueError, match="retries"):
        call_with_retries(Flaky(0), (), {}, -1)
