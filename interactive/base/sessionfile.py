"""Reading sessions' records for the CLI (local files, or a pod's copies).

Every session writes ``$PODCODE_HOME/sessions/<pid>-<start>/session.json``
(mode 0600: it holds the control API token and code-server's password), and
the first one in a home also ``$PODCODE_HOME/session.json`` (see
:mod:`interactive.base.record`, whose :class:`SessionRecord` is what they hold).
The CLI finds them here; a record that is missing or malformed becomes a
:class:`SessionFileError` that says what to do. A record whose process is gone
is shown as such and its secrets are never used.
"""

from __future__ import annotations

import functools
import json
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from interactive.base.errors import PodcodeError
from interactive.base.identity import is_running
from interactive.base.names import task_matches
from interactive.base.record import FILE, SESSIONS, RecordError, SessionRecord, load_record

_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}  # noqa: S104 - we connect, not bind


class SessionFileError(PodcodeError):
    """No usable session record."""


class NoSession(SessionFileError):
    """No session recorded where the CLI looked."""


class BadSessionFile(SessionFileError):
    """A session record lacks what the CLI needs (not an object, no URL or token)."""


def connectable(url: str) -> str:
    """``url`` with a wildcard bind address (0.0.0.0, ::) replaced by 127.0.0.1."""
    parts = urlsplit(url)
    if parts.hostname in _WILDCARD_HOSTS or parts.hostname is None:
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"127.0.0.1{port}"))
    return url


def parse_session(data: Any, where: str) -> SessionRecord:
    """The record of a session to talk to, checked (``where`` names the file in messages),
    with a control URL this machine can connect to."""
    try:
        record = SessionRecord.from_json(data, where)
    except RecordError as exc:
        raise BadSessionFile(str(exc)) from None
    return replace(record, control_url=connectable(record.control_url))


def too_open(path: Path) -> bool:
    """True when others than the owner may read the file (it holds secrets)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))


@dataclass(frozen=True)
class Found:
    """One session's record, where it was found, and whether its process runs (None:
    this machine cannot tell, e.g. a record read from a pod)."""

    where: str
    data: Mapping[str, Any] = field(repr=False)
    running: bool | None

    @functools.cached_property
    def record(self) -> SessionRecord:
        return SessionRecord.from_json(dict(self.data), self.where, serving=False)

    @property
    def pid(self) -> int | None:
        return self.record.pid

    @property
    def task(self) -> str | None:
        return self.record.task

    @property
    def state(self) -> str:
        return self.record.state

    @property
    def started(self) -> float:
        return self.record.started or 0.0

    @property
    def ended(self) -> bool:
        return self.record.ended

    @property
    def gone(self) -> bool:
        """Its process ended without closing the session (killed, out of memory)."""
        return not self.ended and (self.running is False or self.record.gone_at is not None)

    @property
    def open(self) -> bool:
        """A session that may answer: it has a control API and is neither ended nor gone."""
        return not self.ended and not self.gone and bool(self.record.control_url)

    @property
    def shown_state(self) -> str:
        return f"{self.state} (process gone)" if self.gone else self.state

    def matches(self, task: str | None, pid: int | None, session: str | None = None) -> bool:
        """Whether this is the session of ``task`` (its full name, or a tail of it after a
        dot or a script's colon: ``train`` for ``jobs/run.py:train``), of process ``pid``
        and with id ``session`` (None: any)."""
        if task is not None and not task_matches(self.task, task):
            return False
        if session is not None and self.record.session != session:
            return False
        return pid is None or self.pid == pid

    def describe(self) -> str:
        named = f" session {self.record.session}" if self.record.session else ""
        return f"pid {self.pid or '?'}{named} {self.task or '?'} ({self.shown_state})"


def record_files(home: Path) -> list[Path]:
    """Where sessions' records may be in ``home``: each session's own first, then the
    home's and the ranks' (written by older podcode versions too)."""
    return [
        *sorted(home.glob(f"{SESSIONS}/*/{FILE}")),
        *sorted(home.glob(f"rank-*/{SESSIONS}/*/{FILE}")),
        home / FILE,
        *sorted(home.glob(f"rank-*/{FILE}")),
    ]


def unique(records: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """One entry per session (its own record wins over the copies: the home's, a rank's),
    several for a process with several open; sessions only: a rank's placeholder written
    while its task runs has no control API yet and is left out."""
    seen: set[object] = set()
    kept = []
    for where, data in records:
        record = SessionRecord.from_json(data, where, serving=False)
        if not record.control_url and not record.ended:
            continue
        key = (record.pid, record.started, record.session) if record.pid is not None else where
        if key not in seen:
            seen.add(key)
            kept.append((where, data))
    return kept


def find_local(home: Path, damaged: list[str] | None = None) -> list[Found]:
    """Every session recorded in ``home`` on this machine, with its process checked; what
    is wrong with each damaged record is added to ``damaged`` (and the record skipped)."""
    records = []
    for path in record_files(home):
        try:
            data = load_record(path)
            if data is not None:
                SessionRecord.from_json(data, str(path), serving=False)
                records.append((str(path), data))
        except RecordError as exc:
            if damaged is not None:
                damaged.append(str(exc))
    return [Found(where, data, is_running(data.get("pid"), data.get("started")))
            for where, data in unique(records)]


def parse_records(text: str) -> list[dict[str, Any]]:
    """JSON objects written back to back (``cat`` of several records); what is not an
    object, or does not parse, is skipped."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    index = 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            return found
        try:
            value, index = decoder.raw_decode(text, index)
        except ValueError:
            next_object = text.find("\n{", index)
            if next_object < 0:
                return found
            index = next_object + 1
            continue
        if isinstance(value, dict):
            found.append(value)
