from __future__ import annotations

import asyncio
import inspect
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from interactive import SettingError, vscode
from interactive.task import decorator


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


def _enabled_path_taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which enabled paths the wrappers took (the runner is never reached here)."""
    taken: list[str] = []

    def load(kind: str) -> Any:
        def runner(function: Any, ref: Any, checked: Any, args: Any, kwargs: Any) -> Any:
            taken.append(kind)
            return function(*args, **kwargs)

        return lambda: runner

    monkeypatch.setattr(decorator, "_load_run_task", load("sync"))
    monkeypatch.setattr(decorator, "_load_run_task_async", load("async"))
    return taken


@pytest.mark.parametrize(("flag", "level"), [("0", "WARNING"), ("1", "ERROR")])
def test_a_bad_variable_never_raises_and_is_said_once_per_process(
    flag: str, level: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(decorator, "_REPORTED", set())
    taken = _enabled_path_taken(monkeypatch)
    monkeypatch.setenv("PODCODE_ENABLE", flag)
    monkeypatch.setenv("PODCODE_MAX_IDLE_SECONDS", "abc")

    @vscode
    def add(a: int, b: int) -> int:
        return a + b

    @vscode(owner="ana@example.com")
    async def double(a: int) -> int:
        return 2 * a

    with caplog.at_level(logging.WARNING, logger=decorator.__name__):
        assert [add(1, 2), add(2, 2), asyncio.run(double(3)), asyncio.run(double(4))] == [
            3, 4, 6, 8]
    assert taken == []  # podcode stays off, on or not
    [record] = [r for r in caplog.records if r.name == decorator.__name__]
    assert record.levelname == level and record.getMessage().startswith(
        "PODCODE_MAX_IDLE_SECONDS='abc'")

    monkeypatch.delenv("PODCODE_MAX_IDLE_SECONDS")  # the control: the same, fixed

    @vscode
    def fixed(a: int) -> int:
        return a

    assert fixed(1) == 1 and taken == (["sync"] if flag == "1" else [])


@pytest.mark.parametrize("arguments", [{"max_idle_seconds": "abc"}, {"bogus": 1}])
@pytest.mark.parametrize("flag", ["0", "1", "maybe"])
def test_a_bad_argument_in_the_code_still_fails_at_decoration(
    arguments: dict[str, Any], flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODCODE_ENABLE", flag)
    monkeypatch.setenv("PODCODE_PORT", "http")
    with pytest.raises(SettingError, match=repr(next(iter(arguments)))):
        vscode(**arguments)


def test_a_bad_variable_carried_to_another_process_is_said_there(tmp_path: Path) -> None:
    """A task shipped by value takes the variables set where it was decorated; a bad one
    is refused in the process that runs it, at its first call there, in one line."""
    pytest.importorskip("cloudpickle")
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCODE_")}
    shipped = tmp_path / "task.pkl"
    driver = subprocess.run([sys.executable, "driver.py", str(shipped)], cwd=tmp_path,
                            env={**env, "PODCODE_MAX_IDLE_SECONDS": "abc"},
                            check=True, capture_output=True, text=True)
    worker = subprocess.run([sys.executable, "-c", WORKER, str(shipped)], cwd=tmp_path,
                            env=env, capture_output=True, text=True, check=False)
    assert worker.stdout.split() == ["2", "3", "6"], worker.stderr
    for process in (driver, worker):
        [line] = process.stderr.splitlines()
        assert line.startswith("podcode: PODCODE_MAX_IDLE_SECONDS='abc' is ignored"), line
