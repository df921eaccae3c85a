"""The steps of a decorated call, as data: what the one driver asks its executor to do.

Plain slotted dataclasses, not frozen ones: a step is made on every call that succeeds,
and a frozen dataclass costs about 2 us to make where these cost 0.4.

The driver (:func:`interactive.task.runner.call_steps`, and the Ray bug board's
:func:`interactive.ray.bugs.handle`) is a generator that yields these and receives each
one's result, or its exception. The executors (:func:`interactive.task.steps.run` for a
plain function, :func:`interactive.task.aio.run` for a coroutine) do them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Blocking:
    """Work that may block (I/O, a wait on another process): never on the event loop."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(slots=True)
class TaskCall:
    """The task itself: called, or awaited (``retries`` more times if it raises)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    retries: int = 0


@dataclass(slots=True)
class Wait:
    """The next command of ``session``."""

    session: Any
    """A :class:`interactive.session.core.Session` (this layer does not import it)."""


@dataclass(slots=True)
class Leave:
    """A session has closed: after SIGTERM, the process goes."""


Step = Blocking | TaskCall | Wait | Leave
Steps = Generator[Step, Any, Any]
