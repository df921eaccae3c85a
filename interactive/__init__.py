"""podcode: ``@vscode`` opens a VS Code debug session in the pod when a task fails."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from interactive.base.errors import PodcodeError, Preempted, Reaped, SettingError

if TYPE_CHECKING:
    from interactive.inputs.capture import load_inputs
    from interactive.task.decorator import vscode

_LAZY = {"load_inputs": "interactive.inputs.capture", "vscode": "interactive.task.decorator"}
"""Imported on first use, so that ``python -m interactive.<tool>`` (the CLI, the session's
watchdog) does not pay for the decorator's imports."""

__all__ = [
    "PodcodeError",
    "Preempted",
    "Reaped",
    "SettingError",
    "check_alive",
    "checkpoint_dir",
    "load_inputs",
    "vscode",
]


def check_alive() -> bool:
    """False once the pod has been told to stop (SIGTERM): end the loop and checkpoint."""
    from interactive.task.preempt import check_alive as alive

    return alive()


def checkpoint_dir(task: str | None = None) -> Any:
    """A folder for the current task's checkpoints, in the store that outlives the pod."""
    from interactive.storage.checkpoint import checkpoint_dir as folder

    return folder(task)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'interactive' has no attribute {name!r}")
