"""Waiting for a condition in the tests and benchmarks: one deadline loop, sync and async.

Tests prefer fake time; these are for what only a real process, server or browser makes
true. A condition not met by the deadline fails with what was awaited.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], what: str = "the condition", timeout: float = 60.0,
    poll: float = 0.05,
) -> T:
    """Call ``condition`` every ``poll`` seconds until it returns something true; that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} ({timeout:g} s)")
        time.sleep(poll)


async def eventually(
    condition: Callable[[], T], what: str = "the condition", timeout: float = 60.0,
    poll: float = 0.1,
) -> T:
    """:func:`wait_until` for a coroutine: the event loop (a browser, a server) goes on."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} ({timeout:g} s)")
        await asyncio.sleep(poll)
