from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
from pathlib import Path
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


DRIVER = """\
import sys
import cloudpickle
from interactive import vscode


@vscode
def add_one(x):
    return x + 1


@vscode
async def add_two(x):
    return x + 2


print(add_one(0))  # the driver calls it first (podcode off here): the worker decides anew
with open(sys.argv[1], "wb") as out:
    cloudpickle.dump((add_one, add_two), out)
"""
WORKER = """\
import asyncio, pickle, sys
add_one, add_two = pickle.load(open(sys.argv[1], "rb"))
print(add_one(1), asyncio.run(add_two(1)), add_one.__podcode_task__(5))
"""


def test_a_task_defined_in_a_script_pickles_by_value_and_decides_anew(tmp_path: Path) -> None:
    """cloudpickle (Ray, Flyte, multiprocessing frameworks) ships a function of ``__main__``
    by value, closure and globals: nothing process-local may be in the wrapper."""
    pytest.importorskip("cloudpickle")
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**os.environ, "PODCODE_ENABLE": "0"}
    shipped = tmp_path / "task.pkl"
    subprocess.run([sys.executable, "driver.py", str(shipped)], cwd=tmp_path, env=env,
                   check=True, capture_output=True, text=True)
    worker = subprocess.run([sys.executable, "-c", WORKER, str(shipped)], cwd=tmp_path,
                            env=env, capture_output=True, text=True, check=False)
    assert worker.stdout.split() == ["2", "3", "6"], worker.stderr
