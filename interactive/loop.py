"""The session's event loop, on a thread of its own that the debugger never suspends."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def mark_service_thread(thread: threading.Thread | None = None) -> None:
    """Keep a podcode thread out of the debugger: never traced, never suspended.

    When the engineer sits in the post-mortem, the debugger suspends "all
    threads"; the control API, the monitor and their workers must go on.
    """
    thread = thread or threading.current_thread()
    thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
    thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]


def service_executor(prefix: str, workers: int = 4) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool whose workers the debugger leaves alone."""
    return concurrent.futures.ThreadPoolExecutor(
        workers, thread_name_prefix=prefix, initializer=mark_service_thread
    )


class LoopThread:
    """Owns one asyncio loop: start guarded tasks, call into it from other threads, stop."""

    def __init__(self, name: str = "podcode-session") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        mark_service_thread(self._thread)
        self._executor = service_executor(f"{name}-io")
        self.loop.set_default_executor(self._executor)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result here."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Start a background task whose failure is logged, never silently lost."""

        def start() -> None:
            task = self.loop.create_task(coro, name=name)
            self._tasks.add(task)
            task.add_done_callback(self._done)

        self.loop.call_soon_threadsafe(start)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("session task %s failed", task.get_name(), exc_info=task.exception())

    async def _cancel_all(self) -> None:
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self, timeout: float = 10.0) -> None:
        if self.loop.is_closed():
            return
        try:
            self.call(self._cancel_all(), timeout)
        except Exception:
            log.exception("could not stop the session's tasks cleanly")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
