"""Signals that a thread other than the main one took, passed on at once.

CPython runs a Python-level signal handler in the main thread only, between two
bytecodes. The kernel hands a signal sent to the process to the main thread when it can,
but a thread that changes its signal mask at that moment (glibc does, to start a thread)
takes it first. CPython's C-level handler then only marks the signal: a main thread
blocked in C (``Thread.join()`` while a framework runs the task in another thread) does
not wake, and podcode's SIGTERM handler would run when the join returns: never, while the
task waits in a session in that other thread.

CPython's C-level handler also writes the signal's number to the *wakeup fd*, from
whichever thread took it. podcode sets one where nothing else has (asyncio's loop sets its
own; a loop's main thread does not stay blocked in C) and reads it in a thread of its own,
which calls the given function with each signal's number. That function runs in an
ordinary thread, not in a handler, and may also run for a signal that the main thread
handles as well.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

from interactive.base.threads import start_thread

log = logging.getLogger(__name__)

_lock = threading.Lock()
_fds: tuple[int, int] | None = None
"""(read, write): the pipe whose write end is this process's wakeup fd, once set."""
_MARK = 0
"""Not a signal's number: written behind the signals so far by whoever needs to know when
they have been passed on (the reader sets ``_passed`` when it reaches it)."""
_passed = threading.Event()


def watch(on_signal: Callable[[int], None]) -> bool:
    """From the main thread: make this process's wakeup fd podcode's pipe, read by a thread
    that calls ``on_signal`` with each signal's number (the first call's function, for
    good). False where another wakeup fd is set (it stays) or outside the main thread."""
    global _fds
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        fresh = _fds is None
        if _fds is None:
            read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # the C handler never blocks
            os.set_blocking(read, True)
        else:
            read, write = _fds
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError) as exc:
            log.debug("no wakeup fd: %s", exc)
            previous = None
        if previous not in (-1, write):  # someone else's (an event loop's): theirs stays
            if previous is not None:
                signal.set_wakeup_fd(previous)
            if fresh:
                _close(read, write)
            return False
        _fds = (read, write)
    if fresh:
        start_thread(_read, "signals", read, on_signal)
    return True


def _read(fd: int, on_signal: Callable[[int], None]) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        for number in data:
            if number == _MARK:
                _passed.set()
                continue
            try:
                on_signal(number)
            except Exception:
                log.exception("passing on signal %d failed", number)


def _forget() -> None:
    """In a forked child (a DataLoader's worker): its signals are not its parent's, and the
    pipe is the parent's (the thread that reads it did not come along): the child lets it
    go."""
    global _fds
    if _fds is None:
        return
    with contextlib.suppress(ValueError, OSError):
        previous = signal.set_wakeup_fd(-1)
        if previous != _fds[1]:  # not ours any more: put it back
            signal.set_wakeup_fd(previous)
    _close(*_fds)
    _fds = None


os.register_at_fork(after_in_child=_forget)


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
