"""Which process: a pid and its start time, so that a reused pid is never taken for it.

A session is named after its task process: ``<pid>-<start in centiseconds>``
(the start time since the epoch, as the kernel reports it). That name is the
session's folder under ``$PODCODE_HOME/sessions/`` and the value of the
environment marker every process of its IDE inherits. Several sessions may
wait in one process at once (``asyncio.gather``, threads, Ray workers): the
first open one has the process's name, the others ``<pid>-<start>-2``,
``-3``... (:func:`claim_session_id`).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from typing import Any

import psutil

SESSION_VARIABLE = "PODCODE_SESSION_ID"
"""Set in the environment of the session's IDE and everything it starts (terminals,
debug adapters, programs run from them): the session they belong to."""


def process_started(pid: int) -> float | None:
    """When ``pid`` started (to tell a live process from a reused pid); None when it is
    gone, or dead and not yet reaped by its parent (a zombie)."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return round(float(proc.create_time()), 2)
    except psutil.Error:
        return None


_own_start = functools.lru_cache(maxsize=1)(process_started)
"""This process's start time, read once (records are rewritten at every poll)."""


def process_identity() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "started": _own_start(pid)}


def same_start(expected: float | None, actual: float | None) -> bool:
    """Whether two start times name the same process (both rounded to 1/100 s)."""
    return expected is not None and actual is not None and abs(expected - actual) < 0.015


def is_running(pid: object, started: object) -> bool | None:
    """Whether the process a record names still runs; None when the record cannot tell."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if not isinstance(started, (int, float)):
        return process_started(pid) is not None
    return same_start(float(started), process_started(pid))


def session_id(pid: int, started: float | None) -> str:
    """``<pid>-<start in centiseconds>``; ``<pid>`` alone when the start is unknown."""
    return f"{pid}-{round(started * 100)}" if started is not None else str(pid)


def own_session_id() -> str:
    """The name of a session opened by this process."""
    identity = process_identity()
    return session_id(identity["pid"], identity["started"])


_open_ids: set[str] = set()
_ids_lock = threading.Lock()


def claim_session_id() -> str:
    """A name for a session opening in this process, free until :func:`release_session_id`:
    the process's own while no other session of it is open, else a numbered one."""
    own = own_session_id()
    with _ids_lock:
        name = next(n for n in itertools.chain([own], (f"{own}-{i}" for i in itertools.count(2)))
                    if n not in _open_ids)
        _open_ids.add(name)
    return name


_pod_shared_with: list[str] = []
"""Who else the pod serves beyond this process's sessions (a Ray node's other workers)."""


def share_pod(reason: str) -> None:
    """The pod serves more than this process (its raylet, other workers): no session of
    this process deletes it at cleanup."""
    if reason not in _pod_shared_with:
        _pod_shared_with.append(reason)


def pod_shared() -> bool:
    """Whether :func:`share_pod` was called: the pod runs other people's work too."""
    return bool(_pod_shared_with)


def others_open(name: str) -> bool:
    """Whether the pod serves others than the session ``name``: another session of this
    process, or what :func:`share_pod` named."""
    with _ids_lock:
        return bool(_open_ids - {name}) or pod_shared()


def release_session_id(name: str) -> None:
    """The session ``name`` closed: its name may be given again."""
    with _ids_lock:
        _open_ids.discard(name)
