"""Retries: call a failing task again, fresh, with the same inputs.

Only ``Exception`` is retried. ``KeyboardInterrupt``, ``SystemExit``,
``GeneratorExit`` (and every other ``BaseException``, such as
``asyncio.CancelledError``) go through at once, and so does any failure after
SIGTERM arrived: a pod that is going away does not start the task again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from interactive.task import preempt

logger = logging.getLogger(__name__)


class Attempts:
    """The retry policy of one call: after each failure, wait and try again, or give up."""

    def __init__(
        self,
        fn: Callable[..., Any],
        retries: int,
        on_retry: Callable[[int, BaseException], None] | None = None,
        backoff_seconds: float = 0.0,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, not {retries!r}")
        self.fn, self.retries, self.on_retry = fn, retries, on_retry
        self.backoff_seconds = backoff_seconds
        self.attempt = 1
        self.earlier: list[str] = []

    def after(self, exc: Exception) -> float | None:
        """``exc`` ended the attempt: the seconds to wait before the next one, or None when
        there is none (``exc`` then carries a note listing the earlier failures)."""
        if self.attempt > self.retries or not preempt.check_alive():
            _note(exc, self.earlier)
            return None
        self.earlier.append(f"attempt {self.attempt}: {type(exc).__name__}: {exc}")
        logger.warning(
            "%s failed (attempt %d of %d): %s: %s; retrying",
            _name(self.fn), self.attempt, self.retries + 1, type(exc).__name__, exc,
        )
        if self.on_retry is not None:
            self.on_retry(self.attempt, exc)
        self.attempt += 1
        return float(self.backoff_seconds * 2 ** (self.attempt - 2))


def call_with_retries(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    retries: int,
    *,
    on_retry: Callable[[int, BaseException], None] | None = None,
    backoff_seconds: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> object:
    """Call ``fn(*args, **kwargs)`` up to ``retries + 1`` times; return its first value.

    ``on_retry(attempt, error)`` is called after failed attempt number
    ``attempt`` (1-based) when another follows. Between attempts it waits
    ``backoff_seconds * 2 ** (attempt - 1)``. When every attempt fails, the last
    exception is raised with its traceback; with Python 3.11 or later it
    carries a note listing the earlier failures.
    """
    attempts = Attempts(fn, retries, on_retry, backoff_seconds)
    while True:
        try:
            return fn(*args, **dict(kwargs))
        except Exception as exc:
            wait = attempts.after(exc)
            if wait is None:
                raise
        if wait > 0:
            sleep(wait)


async def await_with_retries(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], retries: int
) -> object:
    """:func:`call_with_retries` for a coroutine function: each attempt awaited."""
    attempts = Attempts(fn, retries)
    while True:
        try:
            return await fn(*args, **dict(kwargs))
        except Exception as exc:
            if attempts.after(exc) is None:
                raise


def _note(exc: BaseException, earlier: list[str]) -> None:
    add_note = getattr(exc, "add_note", None)
    if earlier and add_note is not None:
        add_note(f"podcode: {len(earlier)} earlier attempt(s) failed too: " + "; ".join(earlier))


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
