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

What a record holds is :class:`SessionRecord`: the session writes it with
:meth:`SessionRecord.to_json` (through :func:`write_records`), and every reader (the
CLI, the other ranks of a pod) reads it back with :meth:`SessionRecord.from_json`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import stat
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interactive.base.errors import PodcodeError
from interactive.base.files import write_json
from interactive.base.identity import is_running, own_session_id, process_identity, same_start
from interactive.base.phases import ENDED, Phase, phase_of
from interactive.base.settings import podcode_home
from interactive.base.types import Environ

FILE = "session.json"
SESSIONS = "sessions"
SECRETS = ("token", "password")
GONE = "process_gone_at"
"""Set (epoch seconds) once the session's process is known to be gone."""
_LOCK = ".session.lock"

Running = Callable[[object, object], bool | None]


class RecordError(PodcodeError, ValueError):
    """A ``session.json`` that is not a usable record (the message names the file)."""


def _text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


MAX_PID = 1 << 22
"""Linux's largest process id (``pid_max`` can be at most this)."""


def _damage(data: Mapping[str, Any]) -> str | None:
    """What makes a record unusable, in words, or None: values present but out of range
    (a record can lack most keys, but one it has must make sense)."""
    for key in ("started", "last_activity", GONE):
        value = data.get(key)
        if value is not None and (_number(value) is None or not math.isfinite(value)):
            return f"{key} {value!r} is not a finite number"
    pid = data.get("pid")
    if pid is not None and (_int(pid) is None or not 0 < pid <= MAX_PID):
        return f"pid {pid!r} is not a process id"
    for name in ("debug", "ssh"):
        group = data.get(name)
        port = group.get("port") if isinstance(group, dict) else None
        if port is not None and (_int(port) is None or not 0 < port <= 65535):
            return f"{name}.port {port!r} is not a port"
    for key in ("control_url", "code_server_url"):
        url = data.get(key)
        if url is None or url == "":
            continue
        if not isinstance(url, str):
            return f"{key} is not a URL"
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError as exc:
            return f"{key} {url!r}: {exc}"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"{key} {url!r} is not an http URL"
    return None


@dataclass(frozen=True)
class SessionRecord:
    """What one ``session.json`` says: the one schema of the file.

    Three kinds are written, told apart by what they hold: a rank's placeholder while
    its task runs (``state``, ``rank`` and the process: no ``task``), a session that
    serves (everything: it has a ``control_url``), and a session that ended (``state``,
    ``task``, ``error``, ``workspace`` and the process: how to reach it is gone).
    """

    state: str
    """A :class:`Phase` when written by podcode; read back as written ("unknown" if absent)."""
    task: str | None = None
    error: str | None = None
    workspace: str | None = None
    pid: int | None = None
    started: float | None = None
    attempt: int | None = None
    config_root: str | None = None
    control_url: str = ""
    """Empty in a record that does not serve. As written: a wildcard bind address
    (0.0.0.0) stays one (the CLI connects to loopback instead)."""
    token: str = field(default="", repr=False)
    """The control API's bearer token; empty in a record that does not serve."""
    debug_host: str | None = None
    debug_port: int | None = None
    code_server_url: str | None = None
    password: str | None = field(default=None, repr=False)
    """Written only with a ``code_server_url``: no IDE, no password on disk."""
    ide: str | None = None
    """What serves at ``code_server_url``: ``code-server`` (written as no key) or
    ``jupyter`` (JupyterLab)."""
    inputs: str | None = None
    last_activity: float | None = None
    rank: Mapping[str, int] | None = None
    leader: bool | None = None
    gone_at: float | None = None
    """When the process was found gone (``process_gone_at``); its secrets are cleared."""
    session: str | None = None
    """The session's id: ``<pid>-<start>``, then ``-2``, ``-3``... for the other sessions
    of one process open at once (``--session`` chooses by it)."""
    ssh_port: int | None = None
    """The SSH endpoint's port (``ssh.port``), None when it serves no SSH."""
    ssh_host_key: str | None = None
    """Its host key (``ssh.host_key``, ``ssh-ed25519 AAAA...``): what the client pins."""

    @property
    def phase(self) -> Phase | None:
        return phase_of(self.state)

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def serving(self) -> bool:
        """It says how to reach the session (a control API and its token)."""
        return bool(self.control_url and self.token)

    @property
    def debug(self) -> dict[str, Any] | None:
        """``{"host", "port"}`` of its debugger, None when the record names none."""
        if self.debug_host is None and self.debug_port is None:
            return None
        return {"host": self.debug_host, "port": self.debug_port}

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the file, with the keys its kind has always had."""
        data: dict[str, Any] = {"state": str(self.state)}
        if self.task is not None:  # a session's record, not a rank's placeholder
            data.update(task=self.task, error=self.error, workspace=self.workspace)
            if self.session is not None:
                data["session"] = self.session
        if self.control_url:  # it serves: how to reach it
            data.update(
                attempt=self.attempt,
                config_root=self.config_root,
                control_url=self.control_url,
                token=self.token,
                debug={"host": self.debug_host, "port": self.debug_port},
                code_server_url=self.code_server_url,
                password=self.password if self.code_server_url else None,
                inputs=self.inputs,
                last_activity=self.last_activity,
            )
            if self.code_server_url and self.ide not in (None, "code-server"):
                data["ide"] = self.ide  # records with code-server keep the keys they had
            if self.ssh_port is not None:
                data["ssh"] = {"port": self.ssh_port, "host_key": self.ssh_host_key}
        data.update(pid=self.pid, started=self.started)
        if self.rank is not None:
            data["rank"] = dict(self.rank)
        if self.leader is not None:
            data["leader"] = self.leader
        if self.gone_at is not None:
            data[GONE] = self.gone_at
        return data

    @classmethod
    def from_json(cls, data: Any, where: str, *, serving: bool = True) -> SessionRecord:
        """Read a record back; ``where`` names the file in messages. A process id, time,
        port or URL that cannot be one makes the record damaged (:func:`_damage`); other
        values of the wrong type read as absent. With ``serving`` (what a command that
        talks to the session needs) a record without a control URL and token is an
        error."""
        if not isinstance(data, dict):
            raise RecordError(f"{where} is not a JSON object")
        problem = _damage(data)
        if problem:
            raise RecordError(f"record {where} is damaged: {problem}")
        control_url, token = _text(data, "control_url"), _text(data, "token")
        if serving and (control_url is None or token is None):
            missing = "control_url" if control_url is None else "token"
            raise RecordError(f"{where} has no {missing}: is the session still starting?")
        raw_debug, raw_rank, raw_ssh = data.get("debug"), data.get("rank"), data.get("ssh")
        debug: dict[str, Any] = raw_debug if isinstance(raw_debug, dict) else {}
        ssh: dict[str, Any] = raw_ssh if isinstance(raw_ssh, dict) else {}
        leader = data.get("leader")
        return cls(
            state=_text(data, "state") or "unknown",
            task=_text(data, "task"),
            error=_text(data, "error"),
            workspace=_text(data, "workspace"),
            pid=_int(data.get("pid")),
            started=_number(data.get("started")),
            attempt=_int(data.get("attempt")),
            config_root=_text(data, "config_root"),
            control_url=control_url or "",
            token=token or "",
            debug_host=_text(debug, "host"),
            debug_port=_int(debug.get("port")),
            code_server_url=_text(data, "code_server_url"),
            password=_text(data, "password"),
            ide=_text(data, "ide"),
            inputs=_text(data, "inputs"),
            last_activity=_number(data.get("last_activity")),
            rank=dict(raw_rank) if isinstance(raw_rank, dict) else None,
            leader=leader if isinstance(leader, bool) else None,
            gone_at=_number(data.get(GONE)),
            session=_text(data, "session"),
            ssh_port=_int(ssh.get("port")),
            ssh_host_key=_text(ssh, "host_key"),
        )

    @classmethod
    def load(cls, path: Path) -> SessionRecord | None:
        """The record in ``path`` whatever its kind; None when it is missing or not one."""
        data = read_record(path)
        return None if data is None else cls.from_json(data, str(path), serving=False)


def session_path(home: Path | None = None, *, environ: Environ | None = None) -> Path:
    """``home/session.json``; by default the home's (``$PODCODE_HOME``, read from
    ``environ``)."""
    return (podcode_home(environ) if home is None else home) / FILE


def session_dir(home: Path, session: str | None = None) -> Path:
    """``home/sessions/<session>`` (default: the session this process opens)."""
    return home / SESSIONS / (session or own_session_id())


def record_paths(home: Path, base: Path, session: str | None = None) -> list[Path]:
    """Every file a session of this process writes: its own, its rank's, the home's."""
    paths = [session_dir(home, session) / FILE, session_path(home), session_path(base)]
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


MAX_RECORD_BYTES = 1 << 20
"""A record is a few hundred bytes; anything near this is not one."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_record(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, None when there is no file, or a :class:`RecordError`
    ("record PATH is damaged: ...") in bounded time and memory: only a regular file is
    read (a FIFO would block, ``/dev/zero`` never ends), at most :data:`MAX_RECORD_BYTES`,
    strict JSON (no ``NaN`` or ``Infinity``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"record {path} is damaged: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RecordError(f"record {path} is damaged: not a regular file")
        raw = handle.read(MAX_RECORD_BYTES + 1)
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"record {path} is damaged: larger than {MAX_RECORD_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise RecordError(f"record {path} is damaged: {exc}") from None
    if not isinstance(data, dict):
        raise RecordError(f"record {path} is damaged: not a JSON object")
    return data


def read_record(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, damaged or not an object."""
    try:
        return load_record(path)
    except RecordError:
        return None


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
    if current.get("state") in ENDED or current.get(GONE) is not None:
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


def write_records(
    rec: SessionRecord, home: Path, base: Path, *, claim: bool, session: str | None = None
) -> None:
    """Write ``rec`` everywhere a session of this process keeps it: its own folder in
    ``home``; ``home`` itself when it is a rank's (not ``base``); and ``base``'s
    ``session.json`` while this session may claim it (``claim``: the ranks' leader)."""
    data = rec.to_json()
    write_session(session_dir(home, session), data)
    if home != base:
        write_session(home, data)
    if claim:
        write_claimed(base, data)


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
