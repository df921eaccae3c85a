"""The starter notebook: the task's source, its error, its inputs, run it again, resume.

Written into the session's ``.vscode/podcode/`` folder the first time the engineer opens
the notebook, and left alone afterwards (their edits stay while the session lasts); the
folder goes when the session's ``.vscode`` files are put back, like the other files
podcode wrote there. The workspace's snapshot watches the notebook from when it is
written (``Snapshot.adopt``): once changed, it is saved with the edits. The notebook is
plain nbformat 4 JSON: VS Code's built-in ``ipynb`` support opens it.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import FrameType
from typing import Any

from interactive.base.files import write_json
from interactive.base.names import folder_name

HERE = "from interactive.doors.notebook import here\n"
SCRATCH_CELL = 1
"""The starter's empty code cell, right under its title: the IDE puts the cursor there."""


def label(task: str, local_rank: int | None = None) -> str:
    """The kernel's name in the IDE (a distributed task's names the local rank)."""
    rank = "" if local_rank is None else f", local rank {local_rank}"
    return f"podcode: {task}{rank} (failed frame)"


def notebook_path(config_root: Path, session: str) -> Path:
    return config_root / ".vscode" / "podcode" / f"notebook-{session or 'session'}.ipynb"


def rerun_script(config_root: Path, task: str) -> Path:
    """The "debug again" script the session wrote (:mod:`interactive.doors.vscode_files`)."""
    return config_root / ".vscode" / "podcode" / f"rerun_{folder_name(task)}.py"


def frame_source(frame: FrameType | None) -> str:
    """The source of the function the frame runs ('' when it cannot be found)."""
    if frame is None:
        return ""
    try:
        return inspect.getsource(frame.f_code)
    except (OSError, TypeError):
        return ""


def _markdown(text: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text: str) -> dict[str, Any]:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": text}


def render(task: str, error: str | None, where: str, source: str) -> dict[str, Any]:
    """The notebook for ``task`` that failed with ``error`` at ``where`` (file:line)."""
    fence = "````" if "```" in source else "```"
    cells = [
        _markdown(f"# {task} failed\n\n`{error or 'no error'}` at `{where}`\n\n"
                  "Every cell runs in the failed frame, in the task's process: its locals and "
                  "globals as the debugger shows them. Names a cell assigns stay for the next "
                  "cells, and `here` holds podcode's helpers (below). Interrupt a cell that "
                  "runs too long with the stop button. Type your first cell just below."),
        _code(""),
        _markdown(f"## The task's code\n\n{fence}python\n{source.rstrip()}\n{fence}"
                  if source else "## The task's code\n\n(its source could not be read)"),
        _code(f"{HERE}here.error()  # the exception, with its traceback"),
        _code("args, kwargs = here.inputs()  # the inputs as they were at the call\n"
              "args, kwargs"),
        _markdown("## Try the fix\n\nEdit the code and save, then run it again in a new "
                  "process with the captured inputs (the result or the traceback shows "
                  "below), and resume the workflow."),
        _code("here.run_again()  # a new process, the captured inputs, the code on disk"),
        _code("here.resume()  # resume the workflow with your edits"),
    ]
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "podcode", "display_name": f"podcode: {task}",
                           "language": "python"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def write_starter(path: Path, notebook: dict[str, Any]) -> bool:
    """Write ``notebook`` at ``path`` unless it is there already (the engineer's edits
    stay); whether it was written."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, notebook, mode=0o600)
    return True
