"""Write the debug configurations into the workspace's ``.vscode`` folder, and leave it as
the user had it when the session ends.

Every file podcode writes there is tracked in ``.vscode/podcode/written.json``: one it
created is removed at the end, one it merged into (``launch.json``, ``settings.json``,
``mcp.json``, ``.gitignore``) is first copied to ``.vscode/podcode/originals/`` (comments
and all) and put back at the end. A file the user edited during the session is left as it is.

A session killed with SIGKILL leaves its companion file (``.vscode/podcode/session-<id>.json``,
which holds its token) behind when its watchdog could not remove it: the next session to
write here removes those of this host's sessions whose process is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interactive.base.files import parse_jsonc, strip_jsonc, write_json
from interactive.base.identity import is_running
from interactive.base.names import folder_name
from interactive.base.types import TaskRef
from interactive.storage import workspace as workspace_files
from vscode_config import vscode

if TYPE_CHECKING:
    from interactive.base.settings import PortSettings
    from interactive.distributed.peers import Peers

log = logging.getLogger(__name__)

SESSION_FILE = "podcode-session.json"
"""The companion's session (control URL and token): the newest session's, for an IDE
that does not say which session it serves (a desktop VS Code)."""
OWN_SESSION_FILE = "podcode/session-{}.json"
"""Each session's own: the companion of the code-server a session starts reads the one
named by ``PODCODE_SESSION_ID`` in its environment (several sessions of one process share
a workspace, each with its own code-server)."""
_OWN_FILE_NAME = re.compile(r"session-(?P<pid>\d+)(?:-(?P<started>\d+))?(?:-\d+)?\.json")
"""``session-<pid>-<start in centiseconds>[-<n>].json`` (see :data:`OWN_SESSION_FILE`)."""


def _host() -> str:
    """This host and its process id namespace: ``train-x7k2p pid:[4026532459]``."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "pid:[?]"
    return f"{socket.gethostname()} {namespace}"


HOST = _host()
"""Written into each companion file: only a session that sees the same process ids (the
same host or pod, and the same pid namespace: containers of a pod may have their own)
can tell whether the process that wrote it is gone; a workspace may be shared."""
WRITTEN = Path(workspace_files.WRITTEN)
ORIGINALS = Path(workspace_files.ORIGINALS)
HIDDEN_ROOT = Path(__file__).resolve().parents[1]
"""podcode's runtime (the decorator and the session around the task): the debugger leaves
its frames out of the call stack, so that the task's own frames stand out."""


@dataclass
class _Written:
    """What one session wrote into a workspace: its launch configurations and its
    companion file's content."""

    launch: dict[str, Any]
    companion: dict[str, Any]


_users: dict[Path, dict[str, _Written]] = {}
"""The sessions of this process that wrote into each workspace, oldest first: launch.json
holds the configurations of all of them; the last one to close restores the folder."""


@dataclass(frozen=True)
class RankEndpoint:
    """Where one local rank's debugger listens (an attach configuration each), and where
    its session record is (its control API: the IDE's notebook runs cells in that rank's
    frame); ``record`` is None for this rank."""

    local_rank: int
    host: str
    port: int
    record: str | None = None


def rank_endpoints(
    peers: Peers | None, own: tuple[str, int], ports: PortSettings
) -> list[RankEndpoint]:
    """Where each local rank's debugger listens (``own``: this rank's): its record's port,
    else the expected one; none for a single process."""
    if peers is None:
        return []
    known = {p.local_rank: p for p in peers.others() if p.alive}
    endpoints = []
    for local in range(peers.info.local_world_size):
        record = None if local == peers.info.local_rank else str(peers.record_path(local))
        if record is None:
            host, port = own
        elif local in known and (peer_port := known[local].record.debug_port) is not None:
            host, port = known[local].record.debug_host or ports.bind, peer_port
        elif ports.debug_port:
            host, port = ports.bind, ports.debug_port + local
        else:
            continue
        endpoints.append(RankEndpoint(local, host, port, record))
    return endpoints


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Ranks of one pod write the same launch.json: one at a time."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_json(path: Path) -> Any:
    """The file's JSON (comments allowed); a file we cannot parse is kept as a backup."""
    if not path.exists():
        return None
    try:
        return parse_jsonc(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        backup = path.with_name(path.name + ".podcode-backup")
        path.replace(backup)
        log.warning("could not parse %s (%s); kept it as %s", path, exc, backup)
        return None


def write_configurations(
    workspace: Path,
    task: TaskRef,
    *,
    home: Path,
    debug: tuple[str, int],
    control: dict[str, str],
    ranks: Sequence[RankEndpoint] = (),
    source: Path | None = None,
    ide: str = "code-server",
    session: str = "",
    desktop: bool = False,
    language_server: str | None = None,
    agents: bool = True,
) -> Path:
    """Render launch.json, settings.json, mcp.json, the re-run script and the companion's
    session file
    into ``workspace/.vscode``, for the task's ``source`` folder (default: the workspace;
    another folder when the source is read-only).

    With ``ranks`` (a distributed task), one attach configuration per local rank and a
    compound that attaches to all of them replace the single attach configuration. The
    configurations use the companion's debugger when the pod serves code-server, and
    ``debugpy`` (a desktop VS Code) with ``ide="none"``; with ``desktop`` (the session
    serves SSH) a ``debugpy`` attach configuration is there for a desktop VS Code in any case.
    ``language_server``: the module the companion starts for Python language features.
    ``agents``: the IDE's coding agent gets podcode's MCP server (``mcp.json``).
    """
    folder = workspace / ".vscode"
    (folder / "podcode").mkdir(parents=True, exist_ok=True)
    with _locked(folder / "podcode"):
        written = _write(folder, source or workspace, task, home, debug, ranks, ide, desktop,
                         language_server)
        if agents:
            _tracked(folder, "mcp.json", lambda path: write_json(
                path, vscode.merge_mcp(_read_json(path), vscode.mcp_servers(*mcp_command()))))
        sessions = _users.setdefault(workspace.resolve(), {})
        prune_dead_sessions(folder, live=[*sessions, session])
        companion = {**control, "task": task.name, "postmortem": postmortem_name(written),
                     "host": HOST, **_ranks(ranks)}
        sessions[session] = _Written(written, companion)
        _write_shared(folder, sessions, session)
        return folder / "launch.json"


def _ranks(ranks: Sequence[RankEndpoint]) -> dict[str, Any]:
    """For the companion file of a distributed task: this rank's local rank and the other
    ranks' records (the notebook can run in each one's frame); nothing for one process."""
    if not ranks:
        return {}
    own = [rank.local_rank for rank in ranks if rank.record is None]
    return {**({"local_rank": own[0]} if len(own) == 1 else {}),
            "ranks": [{"local_rank": rank.local_rank, "record": rank.record}
                      for rank in ranks if rank.record is not None]}


def postmortem_name(launch: dict[str, Any]) -> str:
    """The configuration that attaches to the failed frame (all ranks' compound for a
    distributed task): the companion starts it when the IDE opens."""
    compounds = launch.get("compounds") or []
    if compounds:
        return str(compounds[0]["name"])
    return next(str(c["name"]) for c in launch["configurations"] if c.get("request") == "attach")


def _write_shared(folder: Path, sessions: dict[str, _Written], newest: str) -> None:
    """launch.json with the configurations of every open session of the workspace, the
    shared companion file (``newest``'s) and each session's own."""
    configurations: dict[str, dict[str, Any]] = {}
    for written in sessions.values():
        for configuration in written.launch["configurations"]:
            configurations.setdefault(configuration["name"], configuration)
    ours = {"version": "0.2.0", "configurations": list(configurations.values()),
            "compounds": [c for w in sessions.values() for c in w.launch.get("compounds", [])]}
    _tracked(folder, "launch.json",
             lambda path: write_json(path, vscode.merge_launch(_read_json(path), ours)))
    write_json(folder / SESSION_FILE, sessions[newest].companion, mode=0o600)
    for session, written in sessions.items():
        write_json(folder / OWN_SESSION_FILE.format(session), written.companion, mode=0o600)


def process_gone(session_file: str) -> bool:
    """Whether the process of the session whose companion file is named ``session_file``
    (``session-<pid>-<start>[-<n>].json``) is gone; False when the name cannot tell."""
    match = _OWN_FILE_NAME.fullmatch(session_file)
    if match is None or match["started"] is None:
        return False
    return is_running(int(match["pid"]), int(match["started"]) / 100) is False


def prune_dead_sessions(folder: Path, live: Sequence[str] = ()) -> list[Path]:
    """Remove from ``folder`` (a workspace's ``.vscode``) the companion files of this
    host's sessions whose process is gone (their tokens), and the shared companion file
    when it holds one of those tokens; the sessions named in ``live`` are kept. What was
    removed."""
    live_files = {OWN_SESSION_FILE.format(session).split("/")[-1] for session in live}
    removed, tokens = [], set()
    for path in sorted((folder / "podcode").glob("session-*.json")):
        if path.name in live_files or not process_gone(path.name):
            continue
        data = _read_companion(path)
        if data.get("host") != HOST:
            continue
        path.unlink(missing_ok=True)
        removed.append(path)
        tokens.add(data.get("token"))
    if tokens - {None} and _read_companion(folder / SESSION_FILE).get("token") in tokens:
        (folder / SESSION_FILE).unlink(missing_ok=True)
        removed.append(folder / SESSION_FILE)
    for path in removed:
        log.info("removed %s: its session's process is gone", path)
    return removed


def _read_companion(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def writable(folder: Path) -> bool:
    """Whether the debug configurations (and the engineer's fixes) can be written here."""
    probe = folder / ".vscode"
    try:
        probe.mkdir(exist_ok=True)
        # a name of its own: sessions of one process probe at once
        fd, test = tempfile.mkstemp(prefix=".podcode-probe-", dir=probe)
        os.close(fd)
        os.unlink(test)
    except OSError:
        return False
    return True


def write_code_workspace(home: Path, folders: Sequence[Path]) -> Path:
    """A ``.code-workspace`` file that opens ``folders`` together in the IDE."""
    path = home / "podcode.code-workspace"
    write_json(path, {"folders": [{"path": str(folder)} for folder in folders]}, mode=0o600)
    return path


def _write(
    folder: Path,
    workspace: Path,
    task: TaskRef,
    home: Path,
    debug: tuple[str, int],
    ranks: Sequence[RankEndpoint],
    ide: str,
    desktop: bool = False,
    language_server: str | None = None,
) -> dict[str, Any]:
    """The re-run script and settings.json written; the session's launch configurations."""
    script = folder / "podcode" / f"rerun_{folder_name(task.name)}.py"
    script.write_text(
        vscode.rerun_script(
            task=task.name,
            module=task.module,
            qualname=task.qualname,
            source=task.source or "",
            workspace=str(workspace),
        ),
        encoding="utf-8",
    )
    ours = vscode.launch_configurations(
        task_name=task.qualname,
        debug_host=debug[0],
        debug_port=debug[1],
        workspace=str(workspace),
        rerun_script=str(script),
        python=sys.executable,
        home=str(home),
        ranks=[asdict(rank) for rank in ranks],
        debug_type=vscode.debug_type(ide),
        desktop_attach=desktop,
        hidden_roots=[str(HIDDEN_ROOT)],
    )
    ours_settings = vscode.workspace_settings(python=sys.executable,
                                              language_server=language_server)
    _tracked(folder, "settings.json", lambda path: write_json(
        path, vscode.merge_settings(_read_json(path), ours_settings)))
    _tracked(folder, ".gitignore", _ignore_ours)
    return ours


def mcp_command() -> tuple[str, list[str]]:
    """How the IDE starts ``podcode mcp``: the ``podcode`` command when it is on the
    ``PATH``, else this interpreter with podcode's CLI module."""
    if shutil.which("podcode"):
        return "podcode", ["mcp"]
    return sys.executable, ["-m", "interactive.cli", "mcp"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _written(folder: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((folder / WRITTEN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _tracked(folder: Path, name: str, write: Callable[[Path], None]) -> None:
    """``write(folder / name)``, the user's version of the file kept (once) to be put back
    at the end, and what podcode wrote remembered (to tell whether the user edits it)."""
    path, written = folder / name, _written(folder)
    if name not in written:
        existed = path.exists()
        if existed:
            original = folder / ORIGINALS / name
            original.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, original)
            text = path.read_text(encoding="utf-8", errors="replace")
            if name.endswith(".json") and strip_jsonc(text) != text:
                log.info("%s has comments, which the merged file cannot keep: your file is "
                         "put back when the session ends (a copy is in %s)", path, original)
        written[name] = {"existed": existed}
    write(path)
    written[name]["sha256"] = _digest(path)
    write_json(folder / WRITTEN, written, mode=0o600)


def restore_workspace(workspace: Path, session: str = "") -> None:
    """The session ended: ``.vscode`` as the user had it (see the module's docstring),
    once no other session of this process that wrote there is still open."""
    folder = workspace / ".vscode"
    users = _users.get(workspace.resolve(), {})
    users.pop(session, None)
    (folder / OWN_SESSION_FILE.format(session)).unlink(missing_ok=True)
    if users:
        with _locked(folder / "podcode"):  # the configurations of those still open
            _write_shared(folder, users, next(reversed(users)))
        return
    (folder / SESSION_FILE).unlink(missing_ok=True)  # the companion's token: useless now
    for name, entry in _written(folder).items():
        # Another rank of the pod, in a process of its own, may restore the same file at
        # the same moment: a file gone under us was restored by it.
        with contextlib.suppress(FileNotFoundError):
            _restore_file(folder, name, entry)
    shutil.rmtree(folder / "podcode", ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.rmdir()  # only when nothing of the user's is left in it


def _restore_file(folder: Path, name: str, entry: dict[str, Any]) -> None:
    """One file podcode wrote: the user's original back, or removed; kept if edited."""
    path = folder / name
    if not path.exists():
        return
    if _digest(path) != entry.get("sha256"):
        log.info("%s was edited during the session: kept as it is", path)
        return
    original = folder / ORIGINALS / name
    if entry.get("existed") and original.exists():
        os.replace(original, path)
    elif not entry.get("existed"):
        path.unlink()


def _ignore_ours(ignore: Path) -> None:
    """Keep the session's secrets and scripts out of git, in the user's own file too."""
    lines = ignore.read_text(encoding="utf-8").splitlines() if ignore.exists() else []
    missing = [entry for entry in (SESSION_FILE, "podcode/") if entry not in lines]
    if not missing:
        return
    header = [] if lines else ["# written by podcode: session secrets and generated scripts"]
    text = "\n".join([*lines, *header, *missing]) + "\n"
    ignore.write_text(text, encoding="utf-8")


