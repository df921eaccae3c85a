"""Where a session's record lives, and how it is written (mode 0600: it holds secrets).

Layout, where ``home`` is ``$PODCODE_HOME`` (or ``$PODCODE_HOME/rank-<n>`` for a
rank of a distributed job)::

    home/sessions/<pid>-<start>/session.json   every session's own record (folder 0700)
    home/sessions/<pid>-<start>/inputs/<task>/ the inputs it captured
    $PODCODE_HOME/session.json                 the first session in the home (claimed)
    $PODCODE_HOME/rank-<n>/session.json        a rank's record, read by the other ranks

``$PODCODE_HOME/session.json`` is claimed under a file lock: a session writes
it only while no other live session owns it. A claim whose process is gone,
or whose session ended, is taken over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from interactive.base.files import write_json
from interactive.base.identity import is_running, own_session_id, process_identity, same_start

FILE = "session.json"
SESSIONS = "sessions"
ENDED_STATES = frozenset({"done", "failed"})
SECRETS = ("token", "password")
GONE = "process_gone_at"
"""Set (epoch seconds) once the session's process is known to be gone."""
_LOCK = ".session.lock"

Running = Callable[[object, object], bool | None]


def session_path(home: Path) -> Path:
    return home / FILE


def session_dir(home: Path, session: str | None = None) -> Path:
    """``home/sessions/<session>`` (default: the session this process opens)."""
    return home / SESSIONS / (session or own_session_id())


def record_paths(home: Path, base: Path) -> list[Path]:
    """Every file a session of this process writes: its own, its rank's, the home's."""
    paths = [session_dir(home) / FILE, session_path(home), session_path(base)]
    return list(dict.fromkeys(paths))


def make_private(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each with mode 0700."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)


def write_session(home: Path, record: Mapping[str, Any]) -> Path:
    make_private(home)
    path = session_path(home)
    write_json(path, dict(record), mode=0o600, durable=False)  # it describes a live process
    return path


def read_record(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_session(home: Path) -> dict[str, Any] | None:
    return read_record(session_path(home))


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    make_private(folder)
    fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def may_claim(
    current: Mapping[str, Any] | None, pid: int, started: float | None, running: Running
) -> bool:
    """Whether the process ``pid``/``started`` may write the home's ``session.json``
    that now holds ``current``: it is free, ours, stale, or its session ended."""
    if current is None:
        return True
    if current.get("pid") == pid and same_start(current.get("started"), started):
        return True
    if current.get("state") in ENDED_STATES or current.get(GONE) is not None:
        return True
    return running(current.get("pid"), current.get("started")) is False


def write_claimed(home: Path, record: Mapping[str, Any], running: Running = is_running) -> bool:
    """Write ``home/session.json`` if this process may claim it; whether it did."""
    me = process_identity()
    with _locked(home):
        if not may_claim(read_session(home), me["pid"], me["started"], running):
            return False
        write_session(home, record)
        return True


def gone_record(
    record: Mapping[str, Any], pid: int, started: float | None, now: float
) -> dict[str, Any] | None:
    """``record`` marked as left by its dead process, secrets cleared; None when the
    record is another process's or already says so."""
    if record.get("pid") != pid or not same_start(record.get("started"), started):
        return None
    if record.get(GONE) is not None and not any(record.get(key) for key in SECRETS):
        return None
    return {**record, **dict.fromkeys(SECRETS), GONE: record.get(GONE) or now}


def mark_gone(path: Path, pid: int, started: float | None, now: float) -> bool:
    """Rewrite ``path`` as :func:`gone_record` says, under the folder's lock; whether it
    changed."""
    if not path.exists():
        return False
    with _locked(path.parent):
        current = read_record(path)
        changed = gone_record(current, pid, started, now) if current is not None else None
        if changed is None:
            return False
        write_json(path, changed, mode=0o600, durable=False)
        return True
