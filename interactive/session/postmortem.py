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
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from interactive.base.context import current_task
from interactive.base.errors import SessionError
from interactive.base.ports import bind_free
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
    another that attaches within one poll would look like one. pydevd calls
    ``on_initialize`` for each new DAP session, so we chain onto it.
    """
    try:
        import pydevd  # vendored by debugpy, importable once debugpy is listening

        debugger = pydevd.get_global_debugger()
        original = debugger.on_initialize
    except (ImportError, AttributeError):
        log.debug("cannot watch debug clients; falling back to polling")
        return

    def on_initialize() -> None:
        _new_client.set()
        original()
        # The newest client takes over: a presenter still stopped for an earlier one (a
        # window left open, a reload, desktop VS Code after the browser) goes round again
        # and stops in the failed frame for this one.
        for thread in list(_presenters):
            _release(thread)

    debugger.on_initialize = on_initialize


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
            # Read by debugpy at import: silence its warning about frozen stdlib modules,
            # which only matters for breakpoints inside the standard library.
            os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
            import debugpy
            import debugpy.server.api  # noqa: F401 - puts the vendored pydevd on the path

            debugpy.configure(subProcess=False)
            failure = _claim_ports_in_pydevd()
            endpoint = _with_deadline(
                lambda: debugpy.listen((host, port), in_process_debug_adapter=True),
                LISTEN_TIMEOUT_SECONDS,
                lambda: f"debugpy could not listen on {host}:{port}: "
                + (repr(failure[0]) if failure else "no answer"),
            )
            _listening = (str(endpoint[0]), int(endpoint[1]))
            _watch_clients()
            log.info("debugpy listens on %s:%d", *_listening)
        return _listening


def _claim_ports_in_pydevd() -> list[BaseException]:
    """Make pydevd claim its port the way podcode does: bind and listen, moving to the next
    port when one is taken. pydevd binds on a thread of its own, and a failed bind there
    leaves debugpy waiting forever; the returned list receives that thread's error."""
    import pydevd

    failure: list[BaseException] = []
    original = pydevd.create_server_socket
    if getattr(original, "__podcode__", False):
        return failure

    def make(host: str, port: int) -> socket.socket:
        sock: socket.socket = original(host=host, port=port)
        try:
            sock.listen(1)
        except OSError:
            sock.close()
            raise
        return sock

    def create_server_socket(host: str, port: int) -> socket.socket:
        try:
            return bind_free(host, port, "debug_port", make=make)
        except BaseException as exc:
            failure.append(exc)
            raise

    create_server_socket.__podcode__ = True  # type: ignore[attr-defined]
    pydevd.create_server_socket = create_server_socket
    return failure


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
            # Listed by the debugger (it carries the stop), traced only at the stop; debugpy
            # reads _MAIN_THREAD by this name. podcode's for the CPU sampler.
            self._thread = start_thread(
                self._serve, name, service=False, exact_name=True,
                attributes={"pydev_do_not_trace": True, _MAIN_THREAD: True},
            )
            _presenters.add(self._thread)
        else:
            self._thread.name = name
            _release(self._thread)  # out of the old exception, if a client still sits in it

    def stop(self) -> None:
        if self._thread is None:
            return  # never presented: debugpy may not even listen
        self._stop.set()
        self._excinfo = None
        _presenters.discard(self._thread)
        self._waiting.set()  # its wait for a client ends
        if self._thread is not None:
            _release(self._thread)  # a client stopped in the exception sees it continue
        # The task's other threads that the debugger suspended with the stop ("all
        # threads"): left suspended, the resumed task would hang on them (a data loader's
        # thread, a join), even after the client went away. Other presenters keep theirs.
        for thread in _suspended_threads():
            if thread not in _presenters:
                _release(thread)

    def _serve(self) -> None:
        import debugpy

        while not self._stop.is_set():
            self._wait_for_client()
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

    def _wait_for_client(self) -> None:
        """Until a client has attached and configured itself, or :meth:`stop`.

        ``debugpy.wait_for_client`` can be cancelled only for its latest caller: with
        several sessions waiting in one process, each presenter waits on its own event."""
        import pydevd  # vendored by debugpy, importable once it listens

        debugger = pydevd.get_global_debugger()
        if debugger is None:
            raise RuntimeError("debugpy does not listen in this process")
        self._waiting = threading.Event()  # set by stop
        configured: threading.Event = debugger._on_configuration_done_event
        # pydevd's own block_until_configuration_done wakes 50 times a second to process
        # commands its command thread processes anyway: a waiting session would burn CPU
        # for nothing. The client's configurationDone sets this event: woken at once.
        with _unhurried(pydevd):
            while not self._stop.is_set() and not self._waiting.is_set():
                if configured.wait(CANCEL_CHECK_SECONDS):
                    return

    @staticmethod
    def _show(debugpy: Any, excinfo: ExcInfo) -> None:
        """Stop the client in the failed frame, on this thread, until it continues.

        pydevd's housekeeping stays slow meanwhile: a stopped thread and the command
        thread are woken at once by each request, their timeouts only pace idle checks."""
        import pydevd

        with _flags(threading.current_thread(), pydev_do_not_trace=False), _unhurried(pydevd):
            _brisk_while_stopped()
            try:
                debugpy.trigger_exception_handler(excinfo, as_uncaught=False)
            except Exception:  # a debugger hiccup must not end the session
                log.exception("could not show the exception to the debugger")


IDLE_PYDEVD_SECONDS = 5.0
"""pydevd's housekeeping threads (its command thread, its check that the program still
runs, its writer) wake every ``TIMEOUT_SLOW`` (0.2 s); while a session waits for a client
or holds it in the failed frame nothing needs them that often (a request wakes the thread
it is for at once): 5 s then."""
STOPPED_CHECK_SECONDS = 1.0
"""How often the thread stopped in the failed frame looks at its state: the client's
Continue (and :func:`_release`) changes it without waking the thread, so this bounds how
long a Continue takes to show."""


class _BriskEvent(threading.Event):
    """A stopped thread's wake-up event, waited on for at most ``STOPPED_CHECK_SECONDS``
    whatever ``TIMEOUT_SLOW`` says."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(
            STOPPED_CHECK_SECONDS if timeout is None else min(timeout, STOPPED_CHECK_SECONDS)
        )


def _brisk_while_stopped() -> None:
    """Give the calling thread pydevd's wake-up event of :class:`_BriskEvent` (once set,
    it stays; a request already signalled on the old one is kept)."""
    slot = _wake_up_slot(threading.current_thread())
    if slot is None:
        return
    events, thread_id = slot
    old = events.get(thread_id)
    if isinstance(old, _BriskEvent):
        return
    brisk = _BriskEvent()
    if old is not None and old.is_set():
        brisk.set()
    events[thread_id] = brisk


def _wake_up_slot(thread: threading.Thread) -> tuple[dict[str, Any], str] | None:
    """pydevd's wake-up events per thread, and ``thread``'s key there (None: debugpy never
    listened in this process)."""
    try:
        import pydevd
        from _pydevd_bundle.pydevd_constants import get_current_thread_id  # type: ignore[import-not-found]
    except ImportError:
        return None
    events = getattr(pydevd.get_global_debugger(), "_thread_events", None)
    return (events, get_current_thread_id(thread)) if isinstance(events, dict) else None


class _Unhurried:
    """Presenters waiting for a client, pydevd's own ``TIMEOUT_SLOW`` to put back, and the
    writer queues whose ``get`` was slowed."""

    lock = threading.Lock()
    waiting = 0
    saved = 0.0
    queues: list[Any] = []


def _writer_queue(pydevd: Any) -> Any:
    """The queue pydevd's writer thread takes messages from (a new one per client)."""
    get_debugger = getattr(pydevd, "get_global_debugger", None)
    debugger = get_debugger() if callable(get_debugger) else None
    return getattr(getattr(debugger, "writer", None), "_cmd_queue", None)


def _slow_get(get: Callable[..., Any], block: bool = True, timeout: float | None = None) -> Any:
    """The writer's ``get``: a message still returns at once, an empty queue is looked at
    once a second instead of ten times."""
    return get(block, None if timeout is None else max(timeout, IDLE_PYDEVD_SECONDS))


@contextlib.contextmanager
def _unhurried(pydevd: Any) -> Iterator[None]:
    """pydevd's housekeeping slowed while at least one presenter waits for a client or
    holds it in the failed frame."""
    with _Unhurried.lock:
        if _Unhurried.waiting == 0:
            _Unhurried.saved = pydevd.TIMEOUT_SLOW
            pydevd.TIMEOUT_SLOW = max(_Unhurried.saved, IDLE_PYDEVD_SECONDS)
        _Unhurried.waiting += 1
        queue_ = _writer_queue(pydevd)
        if queue_ is not None and "get" not in vars(queue_):
            queue_.get = functools.partial(_slow_get, queue_.get)
            _Unhurried.queues.append(queue_)
    try:
        yield
    finally:
        with _Unhurried.lock:
            _Unhurried.waiting -= 1
            if _Unhurried.waiting == 0:
                pydevd.TIMEOUT_SLOW = _Unhurried.saved
                for slowed in _Unhurried.queues:
                    vars(slowed).pop("get", None)
                _Unhurried.queues.clear()


_MAIN_THREAD = "__pydevd_main_thread"
"""debugpy keeps its session while a thread so marked (or a non-daemon one) is listed."""


def _release(thread: threading.Thread) -> None:
    """Let ``thread`` go on if the debugger holds it suspended (no-op otherwise), at once:
    its wait in the debugger is woken."""
    try:
        from _pydevd_bundle.pydevd_additional_thread_info import (  # type: ignore[import-not-found]
            set_additional_thread_info,
        )
        from _pydevd_bundle.pydevd_thread_lifecycle import (  # type: ignore[import-not-found]
            internal_run_thread,
        )
    except ImportError:  # debugpy never listened in this process
        return
    internal_run_thread(thread, set_additional_thread_info)
    slot = _wake_up_slot(thread)
    event = slot[0].get(slot[1]) if slot is not None else None
    if event is not None:
        event.set()


def _suspended_threads() -> list[threading.Thread]:
    """The threads the debugger holds suspended now."""
    try:
        from _pydevd_bundle.pydevd_constants import STATE_SUSPEND
    except ImportError:
        return []
    return [
        thread for thread in threading.enumerate()
        if getattr(getattr(thread, "additional_info", None), "pydev_state", None) == STATE_SUSPEND
    ]


@contextlib.contextmanager
def _flags(thread: threading.Thread, **flags: bool) -> Iterator[None]:
    """Set the attributes debugpy reads on ``thread`` while inside; then as before."""
    before = {name: getattr(thread, name, None) for name in flags}
    for name, value in flags.items():
        setattr(thread, name, value)
    try:
        yield
    finally:
        for name, old in before.items():
            if old is None:
                delattr(thread, name)
            else:
                setattr(thread, name, old)


def out_of_sight(thread: threading.Thread | None = None) -> contextlib.AbstractContextManager[None]:
    """While inside, the debugger neither lists, suspends nor traces ``thread`` (default:
    the calling one, e.g. the main thread waiting for Resume)."""
    return _flags(
        thread or threading.current_thread(), is_pydev_daemon_thread=True, pydev_do_not_trace=True
    )
