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
    if retries < 0:
        raise ValueError(f"retries must be 0 or more, not {retries!r}")
    earlier: list[str] = []
    attempt = 1
    while True:
        try:
            return fn(*args, **dict(kwargs))
        except Exception as exc:
            if attempt > retries or not preempt.check_alive():
                _note(exc, earlier)
                raise
            earlier.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
            logger.warning(
                "%s failed (attempt %d of %d): %s: %s; retrying",
                _name(fn),
                attempt,
                retries + 1,
                type(exc).__name__,
                exc,
            )
            if on_retry is not None:
                on_retry(attempt, exc)
        if backoff_seconds > 0:
            sleep(backoff_seconds * 2 ** (attempt - 1))
        attempt += 1


def _note(exc: BaseException, earlier: list[str]) -> None:
    add_note = getattr(exc, "add_note", None)
    if earlier and add_note is not None:
        add_note(f"podcode: {len(earlier)} earlier attempt(s) failed too: " + "; ".join(earlier))


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
