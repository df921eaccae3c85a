"""Reading a session's ``session.json`` for the CLI (local file, or a pod's copy).

The session writes ``$PODCODE_HOME/session.json`` (mode 0600: it holds the
control API token and code-server's password). The CLI reads it here; a file
that is missing, unreadable or malformed becomes a :class:`SessionFileError`
that says what to do.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from interactive.errors import PodcodeError
from interactive.settings import podcode_home
from interactive.types import Environ

FILE = "session.json"
ENDED_STATES = frozenset({"done", "failed"})
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}  # noqa: S104 - we connect, not bind


class SessionFileError(PodcodeError):
    """No usable session record: ``missing`` (no session), ``invalid`` or ``unreadable``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


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
        raise SessionFileError(f"{where} is not a JSON object", "invalid")
    control_url, token = _text(data, "control_url"), _text(data, "token")
    if control_url is None or token is None:
        missing = "control_url" if control_url is None else "token"
        raise SessionFileError(
            f"{where} has no {missing}: is the session still starting?", "invalid"
        )
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


def parse_session_text(text: str, where: str) -> SessionFile:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SessionFileError(f"{where} is not valid JSON ({exc})", "invalid") from None
    return parse_session(data, where)


def read_session_file(path: Path | None = None) -> SessionFile:
    """The local session's record (default ``$PODCODE_HOME/session.json``)."""
    path = session_path() if path is None else path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SessionFileError(
            f"no local podcode session ({path} does not exist): name a pod (podcode status POD) "
            "or set PODCODE_HOME to the session's folder",
            "missing",
        ) from None
    except OSError as exc:
        raise SessionFileError(f"cannot read {path}: {exc.strerror}", "unreadable") from None
    return parse_session_text(text, str(path))


def too_open(path: Path) -> bool:
    """True when others than the owner may read the file (it holds secrets)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))


def process_alive(pid: int | None) -> bool | None:
    """Whether ``pid`` runs on this machine (None: unknown)."""
    if pid is None or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
