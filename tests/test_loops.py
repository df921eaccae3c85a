"""Which framework loop a failed task runs inside, read from real frames."""

from __future__ import annotations

import sys
from types import FrameType

import pytest

from interactive.distributed import loops


def frame_called_from(module: str) -> FrameType:
    """A frame whose caller is a function of ``module`` (by its ``__name__``)."""
    namespace: dict[str, object] = {"__name__": module, "sys": sys}
    exec("def loop(step):\n    return step()\n", namespace)
    caller = namespace["loop"]
    assert callable(caller)
    frame: FrameType = caller(lambda: sys._getframe())
    return frame


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("lightning.pytorch.loops.fit_loop", "Lightning's training loop"),
        ("pytorch_lightning.loops.fit_loop", "Lightning's training loop"),
        ("transformers.trainer", "transformers.Trainer's training loop"),
        ("torch.nn.parallel.distributed", "DistributedDataParallel's forward"),
    ],
)
def test_a_step_called_by_a_training_loop_is_found(module: str, name: str) -> None:
    found = loops.loop_around(frame_called_from(module))
    assert found is not None and found[0] == name


def test_a_function_that_runs_the_loop_itself_is_not_inside_one() -> None:
    assert loops.loop_around(frame_called_from("train")) is None
    assert loops.loop_around(None) is None


def test_the_error_says_where_the_decorator_goes() -> None:
    error = ValueError("bad step")

    def inside_the_loop() -> bool:
        return loops.warn_if_inside(error)

    namespace: dict[str, object] = {"__name__": "lightning.pytorch.loops.fit_loop"}
    exec("def loop(step):\n    return step()\n", namespace)
    caller = namespace["loop"]
    assert callable(caller) and caller(inside_the_loop) is True
    assert any("trainer.fit" in note for note in error.__notes__)
    assert loops.warn_if_inside(ValueError("outside")) is False
