from __future__ import annotations

import asyncio
import inspect
from typing import get_type_hints

import pytest

from interactive import SettingError, vscode


def test_bare_and_with_arguments_preserve_name_signature_and_hints() -> None:
    def train(lr: float, data: list[int], *, epochs: int = 3) -> float:
        """Train."""
        return lr * sum(data) * epochs

    for wrapped in (vscode(train), vscode(mode="startup")(train)):
        assert wrapped.__name__ == "train" and wrapped.__doc__ == "Train."
        assert inspect.signature(wrapped) == inspect.signature(train)
        assert get_type_hints(wrapped) == get_type_hints(train)
        assert wrapped(0.5, [1, 2]) == 4.5  # disabled outside a pod: a plain call


def test_disabled_failure_propagates_untouched() -> None:
    @vscode
    def fails() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        fails()


def test_generators_are_refused_at_decoration_and_coroutines_stay_coroutines() -> None:
    async def fetch() -> int:
        return 1

    def numbers():  # noqa: ANN202
        yield 1

    async def stream():  # noqa: ANN202
        yield 1

    assert inspect.iscoroutinefunction(vscode(fetch))  # frameworks look: still async
    assert asyncio.run(vscode(fetch)()) == 1  # disabled: the coroutine, awaited
    with pytest.raises(TypeError, match="generator .*numbers"):
        vscode()(numbers)
    with pytest.raises(TypeError, match="generator .*stream"):
        vscode(stream)
    with pytest.raises(TypeError, match="neither a function nor .*func"):
        vscode(object())


def test_bad_setting_fails_at_decoration_time() -> None:
    with pytest.raises(SettingError, match="'max_idle_seconds'"):
        vscode(max_idle_seconds=-5)


def test_enabled_success_returns_value_and_opens_nothing(
    monkeypatch: pytest.MonkeyPatch, podcode_home
) -> None:
    monkeypatch.setenv("PODCODE_ENABLE", "1")

    @vscode(ide="none")
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
    assert not (podcode_home / "session.json").exists()
    assert not (podcode_home / "inputs").exists()  # capture happens only on failure
