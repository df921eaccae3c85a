"""podcode's exceptions: one small hierarchy, each error naming what was wrong."""

from __future__ import annotations

import os
from types import TracebackType


class PodcodeError(Exception):
    """Base class of every error podcode raises on purpose."""


class SettingError(PodcodeError, ValueError):
    """A setting (decorator argument or ``PODCODE_*`` variable) has a bad value."""

    def __init__(self, name: str, value: object, reason: str) -> None:
        self.name = name
        self.value = value
        self.reason = reason
        env = f"PODCODE_{name.upper()}"
        super().__init__(f"podcode setting {name!r} (or {env}) = {value!r}: {reason}")


class RankError(PodcodeError, ValueError):
    """The launcher's rank variables (``RANK``, ``OMPI_COMM_WORLD_*``...) do not add up."""


class InputsError(PodcodeError):
    """Captured inputs are missing, incomplete or unreadable."""


class SessionError(PodcodeError):
    """A debug session could not be opened or driven."""


class ResumeConflict(SessionError):
    """Resume was asked for while the task is already running."""


class Reaped(PodcodeError):
    """The session was cleaned up after being idle; the decorated call raises this."""

    def __init__(self, message: str, saved_edits: str | None = None) -> None:
        super().__init__(message)
        self.saved_edits = saved_edits


class Preempted(PodcodeError):
    """The pod was told to stop (SIGTERM) while the session waited."""


def add_note(error: BaseException, note: str) -> None:
    """Add ``note`` to the traceback Python prints for ``error`` (3.10 has no add_note,
    but prints ``__notes__`` all the same)."""
    notes = getattr(error, "__notes__", None)
    if hasattr(error, "add_note"):
        error.add_note(note)
    elif isinstance(notes, list):
        notes.append(note)
    else:
        error.__notes__ = [note]


_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
"""The ``interactive`` package's folder: frames there are podcode's, not the task's."""


def from_the_task(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its first frames that are podcode's (the runner that called the task):
    the traceback a user reads starts in their own code."""
    head = tb
    while head is not None and head.tb_frame.f_code.co_filename.startswith(_PACKAGE):
        head = head.tb_next
    return head or tb
