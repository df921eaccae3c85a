"""Reading sessions' records for the CLI (local files, or a pod's copies).

Every session writes ``$PODCODE_HOME/sessions/<pid>-<start>/session.json``
(mode 0600: it holds the control API token and code-server's password), and
the first one in a home also ``$PODCODE_HOME/session.json`` (see
:mod:`interactive.base.record`). The CLI finds them here; a record that is
missing or malformed becomes a :class:`SessionFileError` that says
what to do. A record whose process is gone is shown as such and its secrets
are never used.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from interactive.base.errors import PodcodeError
from interactive.base.identity import is_running
from interactive.base.record import ENDED_STATES as ENDED_STATES  # re-exported
from interactive.base.record import FILE, GONE, SESSIONS, read_record
from interactive.base.settings import podcode_home
from interactive.base.types import Environ

_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}  # noqa: S104 - we connect, not bind


class SessionFileError(PodcodeError):
    """No usable session record."""


class NoSession(SessionFileError):
    """No session recorded where the CLI looked."""


class BadSessionFile(SessionFileError):
    """A session record lacks what the CLI needs (not an object, no URL or token)."""


@dataclass(frozen=True)
class SessionFile:
    """What ``session.json`` says about how to reach a session."""

    state: str
    task: str | None
    error: str | None
    workspace: str | None
    control_url: str
    token: str = field(repr=False)
    debug_host: str | None
    debug_port: int | None
    code_server_url: str | None
    password: str | None = field(repr=False)
    pid: int | None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def session_path(environ: Environ | None = None) -> Path:
    return podcode_home(environ) / FILE


def connectable(url: str) -> str:
    """``url`` with a wildcard bind address (0.0.0.0, ::) replaced by 127.0.0.1."""
    parts = urlsplit(url)
    if parts.hostname in _WILDCARD_HOSTS or parts.hostname is None:
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(parts._replace(netloc=f"127.0.0.1{port}"))
    return url


def _text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_session(data: Any, where: str) -> SessionFile:
    """Check the fields the CLI needs; ``where`` names the file in messages."""
    if not isinstance(data, dict):
        raise BadSessionFile(f"{where} is not a JSON object")
    control_url, token = _text(data, "control_url"), _text(data, "token")
    if control_url is None or token is None:
        missing = "control_url" if control_url is None else "token"
        raise BadSessionFile(f"{where} has no {missing}: is the session still starting?")
    raw_debug = data.get("debug")
    debug: dict[str, Any] = raw_debug if isinstance(raw_debug, dict) else {}
    return SessionFile(
        state=_text(data, "state") or "unknown",
        task=_text(data, "task"),
        error=_text(data, "error"),
        workspace=_text(data, "workspace"),
        control_url=connectable(control_url),
        token=token,
        debug_host=_text(debug, "host"),
        debug_port=_int(debug.get("port")),
        code_server_url=_text(data, "code_server_url"),
        password=_text(data, "password"),
        pid=_int(data.get("pid")),
    )


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

    @property
    def pid(self) -> int | None:
        return _int(self.data.get("pid"))

    @property
    def task(self) -> str | None:
        return _text(self.data, "task")

    @property
    def state(self) -> str:
        return _text(self.data, "state") or "unknown"

    @property
    def started(self) -> float:
        value = self.data.get("started")
        return float(value) if isinstance(value, (int, float)) else 0.0

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def gone(self) -> bool:
        """Its process ended without closing the session (killed, out of memory)."""
        return not self.ended and (self.running is False or self.data.get(GONE) is not None)

    @property
    def open(self) -> bool:
        """A session that may answer: it has a control API and is neither ended nor gone."""
        return not self.ended and not self.gone and _text(self.data, "control_url") is not None

    @property
    def shown_state(self) -> str:
        return f"{self.state} (process gone)" if self.gone else self.state

    def matches(self, task: str | None, pid: int | None) -> bool:
        """Whether this is the session of ``task`` (its full name or a dotted tail of it)
        and of process ``pid`` (None: any)."""
        name = self.task or ""
        if task is not None and name != task and not name.endswith(f".{task}"):
            return False
        return pid is None or self.pid == pid

    def describe(self) -> str:
        return f"pid {self.pid or '?'} {self.task or '?'} ({self.shown_state})"


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
    """One entry per process (its own record wins over the copies), sessions only: a rank's
    placeholder written while its task runs has no control API yet and is left out."""
    seen: set[object] = set()
    kept = []
    for where, data in records:
        if _text(data, "control_url") is None and data.get("state") not in ENDED_STATES:
            continue
        key = (data.get("pid"), data.get("started")) if data.get("pid") is not None else where
        if key not in seen:
            seen.add(key)
            kept.append((where, data))
    return kept


def find_local(home: Path) -> list[Found]:
    """Every session recorded in ``home`` on this machine, with its process checked."""
    records = [(str(path), data) for path in record_files(home)
               if (data := read_record(path)) is not None]
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
