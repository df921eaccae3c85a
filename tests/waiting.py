"""Waiting for a condition in the tests and benchmarks: one deadline loop, sync and async;
and calls run at once on threads (:func:`in_threads`).

Tests prefer fake time; these are for what only a real process, server or browser makes
true. A condition not met by the deadline fails with what was awaited.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

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


def in_threads(calls: list[Callable[[], Any]], timeout: float = 60.0) -> list[Any]:
    """Run ``calls`` at once (a barrier lines them up); their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads)
    return results
