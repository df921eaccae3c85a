"""podcode: ``@vscode`` opens a VS Code debug session in the pod when a task fails."""

from __future__ import annotations

from typing import Any

from interactive.capture import load_inputs
from interactive.decorator import vscode
from interactive.errors import PodcodeError, Preempted, Reaped, SettingError

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
    from interactive.preempt import check_alive as alive

    return alive()


def checkpoint_dir(task: str | None = None) -> Any:
    """A folder for the current task's checkpoints, in the store that outlives the pod."""
    from interactive.checkpoint import checkpoint_dir as folder

    return folder(task)
