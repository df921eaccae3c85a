"""Shared aliases and protocols."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Environ = Mapping[str, str]
Hook = Callable[[], Any]
ExcInfo = tuple[type[BaseException], BaseException, Any]
NEVER_DEBUGGED = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)
"""Never turned into a session: the program is being stopped, not failing."""


class Clock(Protocol):
    """Wall-clock seconds since the epoch; tests pass a fake one."""

    def __call__(self) -> float: ...


def system_clock() -> float:
    return time.time()


@dataclass(frozen=True)
class TaskRef:
    """Where a task's code lives."""

    name: str
    """Where the task lives: ``module.qualname``, or ``script.py:qualname`` for a script
    (:func:`interactive.base.names.task_name`)."""
    module: str
    qualname: str
    source: str | None
