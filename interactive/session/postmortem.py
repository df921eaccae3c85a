"""Live post-mortem through debugpy: an attaching client stops in the failed frame.

debugpy can listen once per process, so the listener is shared by every
session of the process. A dedicated thread presents the exception: when a
client attaches it calls ``debugpy.trigger_exception_handler`` with the kept
traceback (the client sees the failed frames and their locals); when the
client continues or disconnects, it waits for the next client.

What the client sees: the thread that presents the exception, named after the
task, stopped in the failed frame. The thread waiting for a command
(:func:`out_of_sight`) and podcode's service threads
(:func:`interactive.base.threads.mark_service_thread`) are neither listed nor
suspended. The presenter is never suspended or traced otherwise, and it stands
for the hidden main thread: debugpy ends its session once no listed thread is
the main one or a non-daemon one.

Everything here that reaches into debugpy's internals goes through
:mod:`interactive.base.pydevd`, which also ends debugpy's threads at the process's exit
once no session waits.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from interactive.base import pydevd
from interactive.base.context import current_task
from interactive.base.errors import SessionError
from interactive.base.threads import run_in_thread, start_thread
from interactive.base.types import ExcInfo

log = logging.getLogger(__name__)

_listening: tuple[str, int] | None = None
_listen_lock = threading.Lock()
_new_client = threading.Event()
"""Set whenever a client starts a debug session (its DAP ``initialize``)."""
_presenters: set[threading.Thread] = set()
"""The threads presenting an exception (one per waiting session of this process)."""


def _watch_clients() -> None:
    """Learn when a new client initializes, even if the previous one just left.

    debugpy only tells whether *a* client is connected; a client that detaches and
    another that attaches within one poll would look like one.
    """
    if not pydevd.on_new_client(_on_new_client):
        log.debug("cannot watch debug clients; falling back to polling")


def _on_new_client() -> None:
    _new_client.set()
    # The newest client takes over: a presenter still stopped for an earlier one (a
    # window left open, a reload, desktop VS Code after the browser) goes round again
    # and stops in the failed frame for this one.
    for thread in list(_presenters):
        pydevd.release(thread)


LISTEN_TIMEOUT_SECONDS = 15.0
"""debugpy waits for its listener with no limit; podcode gives up after this long."""
CANCEL_CHECK_SECONDS = 1.0
"""How often a presenter waiting for a client checks that it was stopped (a client that
configures itself wakes it at once)."""


def listen(host: str, port: int) -> tuple[str, int]:
    """Start debugpy's listener once, on ``port`` or the next free one (claimed, never
    probed: see :mod:`interactive.base.ports`); later calls return where it listens."""
    global _listening
    with _listen_lock:
        if _listening is None:
            pydevd.import_debugger()
            import debugpy

            debugpy.configure(subProcess=False)
            failure = pydevd.claim_ports()
            endpoint = _with_deadline(
                lambda: debugpy.listen((host, port), in_process_debug_adapter=True),
                LISTEN_TIMEOUT_SECONDS,
                lambda: f"debugpy could not listen on {host}:{port}: "
                + (repr(failure[0]) if failure else "no answer"),
            )
            _listening = (str(endpoint[0]), int(endpoint[1]))
            _watch_clients()
            pydevd.end_promptly_at_exit(lambda: bool(_presenters))
            log.info("debugpy listens on %s:%d", *_listening)
        return _listening


T = TypeVar("T")


def _with_deadline(call: Callable[[], T], timeout: float, why: Callable[[], str]) -> T:
    """``call()`` on a helper thread; :class:`SessionError` saying ``why()`` past ``timeout``."""
    running = run_in_thread(call, "debugpy-listen")
    try:
        return running.result(timeout)
    except concurrent.futures.TimeoutError:
        raise SessionError(why()) from None


class PostMortem:
    """Presents one exception to every client that attaches, until stopped."""

    def __init__(self, poll_seconds: float = 0.25) -> None:
        self._excinfo: ExcInfo | None = None
        self._stop = threading.Event()
        self._poll = poll_seconds
        self._thread: threading.Thread | None = None
        self._waiting = threading.Event()
        self.presented = 0
        """How many times a client was shown the exception (for tests and logs)."""

    def present(self, excinfo: ExcInfo | None) -> None:
        """Show ``excinfo`` to clients from now on (None: nothing to show); a client still
        attached (the task failed again after a resume) is shown the new exception."""
        self._excinfo = excinfo
        # The client lists the stop under this thread's name: the task's (its qualified
        # name; a script's path is left out).
        name = (current_task.get() or "task").removeprefix("__main__.").rpartition(":")[2]
        if self._thread is None:
            # Listed by the debugger (it carries the stop), traced only at the stop, and
            # standing for the main thread. podcode's for the CPU sampler.
            self._thread = start_thread(
                self._serve, name, service=False, exact_name=True,
                attributes=pydevd.presenter_markers(),
            )
            _presenters.add(self._thread)
        else:
            self._thread.name = name
            pydevd.release(self._thread)  # out of the old exception, if a client still sits in it

    def excinfo(self) -> ExcInfo | None:
        """The exception shown now (None: none, or stopped)."""
        return self._excinfo

    def stop(self) -> None:
        if self._thread is None:
            return  # never presented: debugpy may not even listen
        self._stop.set()
        self._excinfo = None
        _presenters.discard(self._thread)
        self._waiting.set()  # its wait for a client ends
        pydevd.release(self._thread)  # a client stopped in the exception sees it continue
        # The task's other threads that the debugger suspended with the stop ("all
        # threads"): left suspended, the resumed task would hang on them (a data loader's
        # thread, a join), even after the client went away. Other presenters keep theirs.
        for thread in pydevd.suspended_threads():
            if thread not in _presenters:
                pydevd.release(thread)

    def _serve(self) -> None:
        import debugpy

        while not self._stop.is_set():
            self._wait_for_client(debugpy)
            if self._stop.is_set():
                return
            _new_client.clear()
            excinfo = self._excinfo
            if excinfo is not None and debugpy.is_client_connected():
                self.presented += 1
                log.info("debugger attached: stopping in the failed frame")
                self._show(debugpy, excinfo)
            while (
                debugpy.is_client_connected()
                and not _new_client.is_set()
                and self._excinfo is excinfo
            ):
                if self._stop.wait(self._poll):
                    return

    def _wait_for_client(self, debugpy: Any) -> None:
        """Until a client has attached and configured itself, or :meth:`stop`.

        ``debugpy.wait_for_client`` can be cancelled only for its latest caller: with
        several sessions waiting in one process, each presenter waits on its own event.
        pydevd's own block_until_configuration_done wakes 50 times a second to process
        commands its command thread processes anyway: a waiting session would burn CPU
        for nothing. The client's configurationDone sets the event waited on here: woken
        at once. Where pydevd's event is out of reach, a connected client is polled for."""
        self._waiting = threading.Event()  # set by stop
        configured = pydevd.configuration_done()
        with pydevd.slow_housekeeping():
            while not self._stop.is_set() and not self._waiting.is_set():
                if configured is not None and configured.wait(CANCEL_CHECK_SECONDS):
                    return
                if configured is None and (
                    debugpy.is_client_connected() or self._waiting.wait(self._poll)
                ):
                    return

    @staticmethod
    def _show(debugpy: Any, excinfo: ExcInfo) -> None:
        """Stop the client in the failed frame, on this thread, until it continues.

        pydevd's housekeeping stays slow meanwhile: a stopped thread and the command
        thread are woken at once by each request, their timeouts only pace idle checks."""
        with pydevd.traced(threading.current_thread()), pydevd.slow_housekeeping():
            pydevd.fast_housekeeping_while_stopped()
            try:
                debugpy.trigger_exception_handler(excinfo, as_uncaught=False)
            except Exception:  # a debugger hiccup must not end the session
                log.exception("could not show the exception to the debugger")


def out_of_sight(thread: threading.Thread | None = None) -> contextlib.AbstractContextManager[None]:
    """While inside, the debugger neither lists, suspends nor traces ``thread`` (default:
    the calling one, e.g. the main thread waiting for Resume)."""
    return pydevd.hidden(thread or threading.current_thread())
