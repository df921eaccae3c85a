"""The one module that reaches into debugpy's internals (the pydevd it vendors).

debugpy's public API listens, tells whether a client is connected and shows an exception;
a session needs a little more, and gets it here only:

- claiming debugpy's port the way podcode claims ports (:func:`claim_ports`) and learning
  when a new client starts a debug session (:func:`on_new_client`,
  :func:`configuration_done`);
- keeping pydevd's housekeeping slow while a session waits (:func:`slow_housekeeping`,
  :func:`fast_housekeeping_while_stopped`), letting suspended threads go (:func:`release`,
  :func:`suspended_threads`), taking a thread out of tracing (:func:`stop_tracing_here`);
- importing the debugger ahead and skipping its environment report
  (:func:`import_debugger`, :func:`quiet_environment_report`);
- ending pydevd's threads at once when the process exits after its sessions
  (:func:`end_promptly_at_exit`). pydevd's alive-checking thread is not a daemon: the
  interpreter joins it before any ``atexit`` hook runs, and it notices the end of the
  program only at its next poll, then waits up to 0.5 s for its other threads, polling
  them too; a process that only called ``debugpy.listen()`` takes about 0.7 s to exit.

Each of these checks first that the installed debugpy is one of the versions podcode was
tested with (:data:`TESTED`, the same range as the bound on debugpy in
``pyproject.toml``). With any other version podcode logs one warning and keeps to
debugpy's public API: the post-mortem still serves (a client is noticed by polling), but
the port is not moved past a taken one, the stopped task's other threads are not let go
when the session ends, and the exit takes pydevd's own time.

Thread markers (``pydev_do_not_trace``, ``is_pydev_daemon_thread``,
``__pydevd_main_thread``) are plain attributes that pydevd reads on a thread if present:
setting them touches nothing of debugpy's, so they are set whatever its version.

This module imports debugpy only inside its functions, once a session needs it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from interactive.base.ports import bind_free

log = logging.getLogger(__name__)

TESTED = ((1, 8, 22), (1, 9))
"""The debugpy versions whose internals podcode was tested with: from the first (included)
up to the second (excluded); ``pyproject.toml`` bounds debugpy the same way."""

_checked: bool | None = None
_check_lock = threading.Lock()


def parse_version(text: str) -> tuple[int, ...]:
    """``"1.8.22"`` -> ``(1, 8, 22)``; a part's leading digits only (``"0rc1"`` -> 0), and
    the parts after the first that has none are left out."""
    parts: list[int] = []
    for part in text.strip().split("."):
        digits = part[: len(part) - len(part.lstrip("0123456789"))]
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def within(version: str, tested: tuple[tuple[int, ...], tuple[int, ...]] = TESTED) -> bool:
    """Whether debugpy ``version`` lies in ``tested`` (first included, second excluded)."""
    parsed = parse_version(version)
    return bool(parsed) and tested[0] <= parsed < tested[1]


def installed_version() -> str:
    """The version of the debugpy that this process imports."""
    import debugpy

    return str(debugpy.__version__)


def check(version: str) -> bool:
    """:func:`within`, with one warning (per process) when it is not."""
    if within(version):
        return True
    log.warning(
        "debugpy %s is not one podcode was tested with (%s up to %s, excluded): podcode uses "
        "only debugpy's public API (no port moved past a taken one, suspended threads not let "
        "go after a session, pydevd's own time at exit)",
        version, _dotted(TESTED[0]), _dotted(TESTED[1]),
    )
    return False


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def usable() -> bool:
    """Whether podcode may touch debugpy's internals here (checked once per process)."""
    global _checked
    if _checked is None:
        with _check_lock:
            if _checked is None:
                _checked = check(installed_version())
    return _checked


def _loaded(name: str) -> Any:
    """The module ``name`` of debugpy's vendored pydevd if it is imported and usable."""
    module = sys.modules.get(name)
    return module if module is not None and usable() else None


def _debugger() -> Any:
    """pydevd's global debugger (None: it does not run, or is not usable)."""
    constants = _loaded("_pydevd_bundle.pydevd_constants")
    return constants.get_global_debugger() if constants is not None else None


# Thread markers -----------------------------------------------------------------------

DO_NOT_TRACE = "pydev_do_not_trace"
"""Never traced by the debugger."""
UNLISTED = "is_pydev_daemon_thread"
"""Neither listed nor suspended by the debugger."""
MAIN_THREAD = "__pydevd_main_thread"
"""debugpy keeps its session while a thread so marked (or a non-daemon one) is alive."""


def hide(thread: threading.Thread) -> None:
    """The debugger neither lists, suspends nor traces ``thread``."""
    setattr(thread, DO_NOT_TRACE, True)
    setattr(thread, UNLISTED, True)


@contextlib.contextmanager
def thread_flags(thread: threading.Thread, **flags: bool) -> Iterator[None]:
    """Set the markers debugpy reads on ``thread`` while inside; then as before."""
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


def hidden(thread: threading.Thread) -> contextlib.AbstractContextManager[None]:
    """:func:`hide` ``thread`` while inside."""
    return thread_flags(thread, **{DO_NOT_TRACE: True, UNLISTED: True})


def traced(thread: threading.Thread) -> contextlib.AbstractContextManager[None]:
    """``thread`` traced while inside (the presenter, at the stop)."""
    return thread_flags(thread, **{DO_NOT_TRACE: False})


def presenter_markers() -> dict[str, object]:
    """The markers of the thread that presents an exception: listed, standing for the
    main thread, traced only at the stop."""
    return {DO_NOT_TRACE: True, MAIN_THREAD: True}


def stop_tracing_here() -> None:
    """Take the calling thread out of the debugger's tracing (a pool's worker marked from
    inside, after the debugger started tracing it at birth)."""
    debugger = _debugger()
    if debugger is not None:
        debugger.disable_tracing()


# Importing ahead ----------------------------------------------------------------------


def prepare_import() -> None:
    """Read by pydevd at import: silence its warning about frozen stdlib modules, which
    only matters for breakpoints inside the standard library."""
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def import_debugger() -> None:
    """Import debugpy and, when usable, its debugger (pydevd) with it."""
    prepare_import()
    if usable():
        import debugpy.server.api  # noqa: F401 - puts the vendored pydevd on the path


def quiet_environment_report() -> None:
    """Skip debugpy's environment report (it reads every installed distribution's
    metadata) unless one of its logs takes ``info`` lines."""
    if not usable():
        return
    from debugpy.common import log as debugpy_log

    report: Any = debugpy_log.describe_environment
    if getattr(report, "podcode_quiet", False):
        return

    def describe_environment(header: str) -> None:
        files: dict[str, Any] = getattr(debugpy_log, "_files", {})
        if any("info" in getattr(file, "levels", ("info",)) for file in files.values()):
            report(header)

    describe_environment.podcode_quiet = True  # type: ignore[attr-defined]
    debugpy_log.describe_environment = describe_environment


# Listening ----------------------------------------------------------------------------


def claim_ports() -> list[BaseException]:
    """Make pydevd claim its port the way podcode does: bind and listen, moving to the next
    port when one is taken. pydevd binds on a thread of its own, and a failed bind there
    leaves debugpy waiting forever; the returned list receives that thread's error.
    Not usable: debugpy binds as it does (a taken port fails)."""
    failure: list[BaseException] = []
    pydevd = _loaded("pydevd")
    if pydevd is None or getattr(pydevd.create_server_socket, "__podcode__", False):
        return failure
    original = pydevd.create_server_socket

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


def on_new_client(callback: Callable[[], None]) -> bool:
    """Call ``callback`` after pydevd initializes each new DAP session (a client that
    detaches and another that attaches within one poll are two). False: not possible
    here; poll ``debugpy.is_client_connected()`` instead."""
    debugger = _debugger()
    original = getattr(debugger, "on_initialize", None)
    if original is None:
        return False

    def on_initialize() -> None:
        original()
        callback()

    debugger.on_initialize = on_initialize
    return True


def configuration_done() -> threading.Event | None:
    """The event pydevd sets when a client finished configuring itself (None: unknown)."""
    event = getattr(_debugger(), "_on_configuration_done_event", None)
    return event if isinstance(event, threading.Event) else None


# Waiting ------------------------------------------------------------------------------

IDLE_PYDEVD_SECONDS = 5.0
"""pydevd's housekeeping threads (its command thread, its check that the program still
runs, its writer) wake every ``TIMEOUT_SLOW`` (0.2 s); while a session waits for a client
or holds it in the failed frame nothing needs them that often (a request wakes the thread
it is for at once): 5 s then."""
STOPPED_CHECK_SECONDS = 1.0
"""How often the thread stopped in the failed frame looks at its state: the client's
Continue (and :func:`release`) changes it without waking the thread, so this bounds how
long a Continue takes to show."""


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
    every :data:`IDLE_PYDEVD_SECONDS` instead of ten times a second."""
    return get(block, None if timeout is None else max(timeout, IDLE_PYDEVD_SECONDS))


@contextlib.contextmanager
def slow_housekeeping(pydevd: Any = None) -> Iterator[None]:
    """pydevd's housekeeping slowed while at least one presenter waits for a client or
    holds it in the failed frame. When the last one leaves, pydevd's own pace is back
    and its alive check, asleep at the slow one, is woken (a process that ends now is not
    held up by a wait begun at the slow pace). ``pydevd``: the module (tests pass one)."""
    pydevd = _loaded("pydevd") if pydevd is None else pydevd
    if pydevd is None:
        yield
        return
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
                _wake_housekeeping(pydevd)


def _wake_housekeeping(pydevd: Any) -> None:
    """Wake pydevd's alive check (a non-daemon thread, which an exit waits for) from a wait
    begun at the slow pace. It waits on an event nobody sets but its end: it is given a new
    one, and the old one, set, wakes it once. Its other threads are daemons: left alone."""
    get_debugger = getattr(pydevd, "get_global_debugger", None)
    debugger = get_debugger() if callable(get_debugger) else None
    alive = getattr(debugger, "check_alive_thread", None)
    asleep = getattr(alive, "_wait_event", None)
    if isinstance(asleep, threading.Event):
        alive._wait_event = threading.Event()  # type: ignore[union-attr]
        asleep.set()


class _BriskEvent(threading.Event):
    """A stopped thread's wake-up event, waited on for at most ``STOPPED_CHECK_SECONDS``
    whatever ``TIMEOUT_SLOW`` says."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(
            STOPPED_CHECK_SECONDS if timeout is None else min(timeout, STOPPED_CHECK_SECONDS)
        )


def fast_housekeeping_while_stopped() -> None:
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
    constants = _loaded("_pydevd_bundle.pydevd_constants")
    if constants is None:
        return None
    events = getattr(constants.get_global_debugger(), "_thread_events", None)
    return (events, constants.get_current_thread_id(thread)) if isinstance(events, dict) else None


def release(thread: threading.Thread) -> None:
    """Let ``thread`` go on if the debugger holds it suspended (no-op otherwise), at once:
    its wait in the debugger is woken."""
    info = _loaded("_pydevd_bundle.pydevd_additional_thread_info")
    lifecycle = _loaded("_pydevd_bundle.pydevd_thread_lifecycle")
    if info is None or lifecycle is None:  # debugpy never listened in this process
        return
    lifecycle.internal_run_thread(thread, info.set_additional_thread_info)
    slot = _wake_up_slot(thread)
    event = slot[0].get(slot[1]) if slot is not None else None
    if event is not None:
        event.set()


def suspended_threads() -> list[threading.Thread]:
    """The threads the debugger holds suspended now."""
    constants = _loaded("_pydevd_bundle.pydevd_constants")
    if constants is None:
        return []
    return [
        thread for thread in threading.enumerate()
        if getattr(getattr(thread, "additional_info", None), "pydev_state", None)
        == constants.STATE_SUSPEND
    ]


# Exit ---------------------------------------------------------------------------------

EXIT_FLUSH_SECONDS = 0.2
"""At exit, how long pydevd's writer may take to send its last message (the exit) to a
client still attached."""

_exit_checks: list[Callable[[], bool]] = []


def end_promptly_at_exit(still_needed: Callable[[], bool]) -> None:
    """When the interpreter exits, end pydevd's threads without its polls: at once, or, while
    non-daemon threads of the program still run, as soon as they have ended (the debugger
    serves them until then); not at all while ``still_needed()`` (a session still waits).
    Runs before the interpreter joins the non-daemon threads (pydevd's alive check is one),
    which is before any ``atexit`` hook."""
    with _check_lock:
        first = not _exit_checks
        _exit_checks.append(still_needed)
    if not first or not usable():
        return
    register: Callable[[Callable[[], None]], None] | None = getattr(
        threading, "_register_atexit", None
    )
    if register is None:
        log.debug("no threading exit hook in this Python: pydevd ends at its own pace")
        return
    try:
        register(_end_at_exit)
    except RuntimeError:  # the interpreter is already going down
        log.debug("too late for a threading exit hook", exc_info=True)


def _end_at_exit() -> None:
    """The exit hook: never raises (an error here would only be printed)."""
    try:
        debugger = _debugger()
        if debugger is None:
            return
        running = _program_threads(debugger)
        if not running:
            _end_unless_needed(debugger, [])
            return
        watcher = threading.Thread(target=_end_unless_needed, args=(debugger, running),
                                   name="podcode-pydevd-exit", daemon=True)
        hide(watcher)
        watcher.start()
    except Exception:
        log.debug("could not end the debugger's threads at exit", exc_info=True)


def _end_unless_needed(debugger: Any, running: list[threading.Thread]) -> None:
    """Once ``running`` have ended, end pydevd's threads unless a session still waits."""
    try:
        for thread in running:
            thread.join()
        if any(check() for check in list(_exit_checks)):
            log.debug("a session still waits at exit: pydevd ends at its own pace")
            return
        end_now(debugger)
    except Exception:
        log.debug("could not end the debugger's threads at exit", exc_info=True)


def _program_threads(debugger: Any) -> list[threading.Thread]:
    """The non-daemon threads still running, other than this one and pydevd's own (a
    thread waiting in a session is one: hidden from the debugger, it is the program's)."""
    own = set(getattr(debugger, "created_pydb_daemon_threads", None) or ())
    own.add(getattr(debugger, "check_alive_thread", None))
    current = threading.current_thread()
    return [
        thread for thread in threading.enumerate()
        if thread is not current and not thread.daemon and thread.is_alive()
        and thread not in own
    ]


def end_now(debugger: Any) -> None:
    """End pydevd's threads without waiting for them, except the writer's last message
    (:data:`EXIT_FLUSH_SECONDS` at most). Its alive check, told to end, ends at once;
    pydevd's own exit hook then finds no debugger left to end."""
    debugger.dispose_and_kill_all_pydevd_threads(wait=True, timeout=0)
    writer = getattr(debugger, "writer", None)
    if isinstance(writer, threading.Thread) and writer.is_alive():
        writer.join(EXIT_FLUSH_SECONDS)
