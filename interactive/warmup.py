"""Import what a session needs in the background, once, so a failure opens it fast.

A session needs aiohttp, the code-server launcher and friends: about 0.3 s of
imports that would otherwise sit between the exception and code-server's
start. The first enabled call imports them on a daemon thread while the task
runs; nothing is started, bound or written.
"""

from __future__ import annotations

import importlib
import logging
import threading

from interactive.loop import mark_service_thread

log = logging.getLogger(__name__)

MODULES = (
    "interactive.session",
    "interactive.control",
    "interactive.postmortem",
    "server_bootstrap.launch",
    "server_bootstrap.locate",
    "server_bootstrap.extensions",
)
_started = threading.Event()
_thread: threading.Thread | None = None


def _import_all() -> None:
    mark_service_thread()
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the session will report it properly if it ever opens
            log.debug("warm-up import of %s failed", name, exc_info=True)


def warm_up() -> None:
    """Start the background imports (idempotent, cheap after the first call)."""
    global _thread
    if _started.is_set():
        return
    _started.set()
    _thread = threading.Thread(target=_import_all, name="podcode-warmup", daemon=True)
    _thread.start()


def settle(timeout: float = 30.0) -> None:
    """Wait for the background imports before importing the same modules here: two
    threads importing one package at once can see each other's half-initialised modules."""
    if _thread is not None and _thread is not threading.current_thread():
        _thread.join(timeout)
