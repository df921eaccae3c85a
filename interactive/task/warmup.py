"""Prepare what a session needs in the background, once, so a failure opens it fast.

A session needs aiohttp, the code-server launcher and friends: about 0.3 s of
imports that would otherwise sit between the exception and code-server's
start, and then compete with code-server's boot for the CPU. The first enabled
call, on a daemon thread while the task runs:

- imports them, and debugpy's debugger (pydevd, about 0.1 s more) with
  ``PYDEVD_DISABLE_FILE_VALIDATION=1`` as the session sets it. Importing pydevd
  installs its ``breakpoint()`` hook: the task's own hook is put back at once, and
  pydevd's is installed when a session opens (:func:`settle`), as when the session
  imported it;
- parses and compiles the ``.vscode`` templates (in memory);
- turns off debugpy's environment report when nothing would record it.
  ``debugpy.listen()`` describes the environment for its log, reading the
  metadata of every installed distribution from disk (0.1 s and more in an ML
  image), even when its log is off, which it is unless ``DEBUGPY_LOG_DIR`` or
  ``DEBUGPY_LOG_STDERR`` asks for it. It does that while code-server boots.

Both go through :mod:`interactive.base.pydevd`, podcode's one door to debugpy's
internals. Nothing is started, bound or written. A task that never fails pays about 0.3 s of
one core, on a background thread, once per process.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from interactive.base import pydevd
from interactive.base.threads import start_thread

log = logging.getLogger(__name__)

MODULES = (
    "interactive.session.core",
    "interactive.doors.control",
    "interactive.session.postmortem",
    "server_bootstrap.codeserver",
    "server_bootstrap.locate",
    "server_bootstrap.extensions",
)
_started = threading.Event()
_thread: threading.Thread | None = None
_hooks: tuple[Callable[..., Any], Callable[..., Any]] | None = None
"""(pydevd's breakpoint hook, the one it replaced): set aside until a session opens."""


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the session will report it properly if it ever opens
            log.debug("warm-up import of %s failed", name, exc_info=True)
    for step in (import_debugger, _compile_templates, pydevd.quiet_environment_report):
        try:
            step()
        except Exception:
            log.debug("warm-up step %s failed", step.__name__, exc_info=True)


def import_debugger() -> None:
    """Import pydevd, keeping the task's ``breakpoint()`` hook until a session opens."""
    global _hooks
    before = sys.breakpointhook
    pydevd.import_debugger()
    if sys.breakpointhook is not before:
        _hooks = (sys.breakpointhook, before)
        sys.breakpointhook = before


def _compile_templates() -> None:
    from vscode_config import vscode

    vscode.prepare()


def warm_up() -> None:
    """Start the background imports (idempotent, cheap after the first call)."""
    global _thread
    if _started.is_set():
        return
    _started.set()
    _thread = start_thread(_import_all, "warmup")


def settle(timeout: float = 30.0) -> None:
    """Wait for the background imports before importing the same modules here: two
    threads importing one package at once can see each other's half-initialised modules."""
    global _hooks
    if _thread is not None and _thread is not threading.current_thread():
        _thread.join(timeout)
    if _hooks is not None and sys.breakpointhook is _hooks[1]:
        sys.breakpointhook = _hooks[0]  # the session's debugger takes breakpoint(), as before
    _hooks = None
