"""Stopping an install from another thread: what it runs is ended, nothing half-built is kept.

A session installs code-server on a thread of its own while the debugger and the control
API serve. When the session ends first (``podcode abort``, a resume that succeeds, a
cleanup), it cancels the install: the npm processes are stopped and the staging folder is
removed, so the task's process ends at once instead of waiting minutes for npm.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from server_bootstrap.errors import InstallError


class InstallCancelled(InstallError):
    """The install was stopped before it finished (its owner no longer needs it)."""


class Cancel:
    """A flag one thread sets and the install's steps act on: ``cancel()`` calls what each
    running step registered (stopping its process) and later steps refuse to start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []
        self.cancelled = False

    def cancel(self) -> None:
        """Stop the install: every registered stop runs now, once."""
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Have ``cancel()`` call ``callback`` (at once when it already was); returns what
        unregisters it."""
        with self._lock:
            if not self.cancelled:
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def check(self, what: str) -> None:
        """Raise :class:`InstallCancelled` before ``what`` starts if the install was stopped."""
        if self.cancelled:
            raise InstallCancelled(f"the install of code-server was stopped before {what}")

    def _remove(self, callback: Callable[[], object]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)
