"""What a cell of the podcode notebook can call, for the session it runs in::

    from interactive.doors.notebook import here
    here.error()             # the exception, as the task raised it
    args, kwargs = here.inputs()   # the task's inputs as they were at the call
    here.run_again()         # the task in a new process with those inputs (edits included)
    here.resume()            # resume the workflow with the edits (podcode: Resume workflow)

Each finds its session through the kernel thread that runs the cell.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable


class Runner(Protocol):
    """The kernel that runs a cell (:class:`interactive.doors.notebook.kernel.FrameKernel`):
    what it offers the cell."""

    helpers: dict[str, Any]

_local = threading.local()
RUN_AGAIN_TAIL_CHARS = 20_000
"""How much of the new process's output a cell shows (its end)."""


@dataclass(frozen=True)
class SessionHelpers:
    """What the helpers need of the session (set by the control API's notebook routes)."""

    failure: Callable[[], Any]
    inputs: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    resume: Callable[[], dict[str, Any] | None]
    rerun_script: Path
    home: Path
    workspace: Path


def attach(kernel: Runner) -> None:
    """The calling thread runs ``kernel``'s cells."""
    _local.kernel = kernel


def _session() -> SessionHelpers:
    kernel = getattr(_local, "kernel", None)
    session = kernel.helpers.get("session") if kernel is not None else None
    if not isinstance(session, SessionHelpers):
        raise RuntimeError("interactive.doors.notebook.here works in a cell of the podcode "
                           "notebook (podcode: Open notebook on the failure)")
    return session


def error() -> None:
    """Print the exception the session shows, with its traceback."""
    excinfo = _session().failure()
    if excinfo is None:
        print("the session shows no exception now")
        return
    traceback.print_exception(excinfo[1])


def inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The task's ``(args, kwargs)`` as they were at the call (loaded from the capture)."""
    return _session().inputs()


def resume() -> dict[str, Any] | None:
    """Resume the workflow with the edits; what the resume will patch."""
    return _session().resume()


def run_again(timeout: float | None = None) -> int:
    """Run the task again in a new process with the captured inputs and the code as it is
    now on disk; print its output (the result or the traceback) and return its exit
    status. An interrupt of the cell ends the process."""
    session = _session()
    env = {**os.environ, "PODCODE_ENABLE": "0", "PODCODE_HOME": str(session.home)}
    process = subprocess.Popen(  # noqa: S603 - this interpreter, podcode's own script
        [sys.executable, str(session.rerun_script)], cwd=session.workspace, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        output = _wait(process, deadline)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    print(output[-RUN_AGAIN_TAIL_CHARS:], end="")
    print(f"[the new process exited with status {process.returncode}]")
    return process.returncode


def _wait(process: subprocess.Popen[str], deadline: float | None) -> str:
    """The process's output once it ended; woken often so that an interrupt gets in."""
    while True:
        try:
            out, _ = process.communicate(timeout=0.1)
            return out
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("the task did not end in time in the new process") from None
