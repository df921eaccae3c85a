"""The session's event loop, on a thread of its own that the debugger never suspends."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from interactive.base.threads import mark_service_thread, service_executor, start_thread

log = logging.getLogger(__name__)
T = TypeVar("T")


def _hide_child_waits() -> None:
    """asyncio before 3.12 waits for each child process (code-server) on a thread of its
    own; make those threads service threads. From 3.12 the default watcher on Linux uses
    a pidfd on the loop instead, and setting a watcher is deprecated.

    The watcher is process-wide: only asyncio's default one is replaced, by the same kind
    whose threads the debugger leaves alone.
    """
    if sys.version_info >= (3, 12) or sys.platform == "win32":
        return
    policy = asyncio.get_event_loop_policy()
    if type(policy.get_child_watcher()) is asyncio.ThreadedChildWatcher:
        policy.set_child_watcher(_ServiceChildWatcher())


if sys.version_info < (3, 12) and sys.platform != "win32":

    class _ServiceChildWatcher(asyncio.ThreadedChildWatcher):
        def _do_waitpid(self, *args: Any) -> None:
            mark_service_thread()
            super()._do_waitpid(*args)  # type: ignore[misc]


class LoopThread:
    """Owns one asyncio loop: start guarded tasks, call into it from other threads, stop."""

    def __init__(self, name: str = "podcode-session") -> None:
        _hide_child_waits()
        self.loop = asyncio.new_event_loop()
        self._executor = service_executor(f"{name}-io")
        self.loop.set_default_executor(self._executor)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = start_thread(self._run, name)

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
