""""Debug again" calls the task as its framework would: awaited, or in Flyte 2's local mode."""

from __future__ import annotations

import asyncio

import pytest

from interactive import vscode
from interactive.inputs.rerun import call_again


def test_a_decorated_function_is_called_through_to_its_own_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PODCODE_ENABLE", "1")  # even so, the re-run is not a session

    @vscode
    def broken(x: int) -> int:
        raise ValueError(x)

    with pytest.raises(ValueError, match="3"):
        call_again(broken, (3,), {})


def test_a_coroutine_is_run_to_its_end() -> None:
    async def halve(x: int, *, by: int) -> float:
        await asyncio.sleep(0)
        return x / by

    assert call_again(vscode(halve), (3,), {"by": 2}) == 1.5


def test_a_flyte2_task_runs_in_a_local_flyte_context() -> None:
    flyte = pytest.importorskip("flyte")
    env = flyte.TaskEnvironment(name="podcode_rerun")

    @env.task
    async def split(x: int) -> tuple[int, int]:
        return x // 2, x % 2

    @env.task
    def one(x: int) -> int:
        return x + 1

    assert call_again(split, (7,), {}) == (3, 1)  # several outputs: a tuple
    assert call_again(vscode(one), (1,), {}) == 2  # one: the value, not Flyte's outputs
