"""Write the debug configurations into the workspace's ``.vscode`` folder."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from interactive.base.files import parse_jsonc, write_json
from interactive.base.names import folder_name
from interactive.base.types import TaskRef
from vscode_config import vscode

log = logging.getLogger(__name__)

SESSION_FILE = "podcode-session.json"
HIDDEN_ROOT = Path(__file__).resolve().parents[1]
"""podcode's runtime (the decorator and the session around the task): the debugger leaves
its frames out of the call stack, so that the task's own frames stand out."""


@dataclass(frozen=True)
class RankEndpoint:
    """Where one local rank's debugger listens (an attach configuration each)."""

    local_rank: int
    host: str
    port: int


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
) -> Path:
    """Render launch.json, settings.json, the re-run script and the companion's session file
    into ``workspace/.vscode``, for the task's ``source`` folder (default: the workspace;
    another folder when the source is read-only).

    With ``ranks`` (a distributed task), one attach configuration per local rank and a
    compound that attaches to all of them replace the single attach configuration. The
    configurations use the companion's debugger when the pod serves code-server, and
    ``debugpy`` (a desktop VS Code) with ``ide="none"``.
    """
    folder = workspace / ".vscode"
    (folder / "podcode").mkdir(parents=True, exist_ok=True)
    with _locked(folder / "podcode"):
        return _write(folder, source or workspace, task, home, debug, control, ranks, ide)


def writable(folder: Path) -> bool:
    """Whether the debug configurations (and the engineer's fixes) can be written here."""
    probe = folder / ".vscode"
    try:
        probe.mkdir(exist_ok=True)
        test = probe / f".podcode-probe-{os.getpid()}"
        test.write_bytes(b"")
        test.unlink()
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
    control: dict[str, str],
    ranks: Sequence[RankEndpoint],
    ide: str,
) -> Path:
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
        hidden_roots=[str(HIDDEN_ROOT)],
    )
    launch = folder / "launch.json"
    write_json(launch, vscode.merge_launch(_read_json(launch), ours))
    settings = folder / "settings.json"
    ours_settings = vscode.workspace_settings(python=sys.executable)
    write_json(settings, vscode.merge_settings(_read_json(settings), ours_settings))
    write_json(folder / SESSION_FILE, {**control, "task": task.name}, mode=0o600)
    _ignore_ours(folder / ".gitignore")
    return launch


def _ignore_ours(ignore: Path) -> None:
    """Keep the session's secrets and scripts out of git, in the user's own file too."""
    lines = ignore.read_text(encoding="utf-8").splitlines() if ignore.exists() else []
    missing = [entry for entry in (SESSION_FILE, "podcode/") if entry not in lines]
    if not missing:
        return
    header = [] if lines else ["# written by podcode: session secrets and generated scripts"]
    text = "\n".join([*lines, *header, *missing]) + "\n"
    ignore.write_text(text, encoding="utf-8")


def remove_session_file(workspace: Path) -> None:
    """The companion's token is useless once the session ends: remove it."""
    path = workspace / ".vscode" / SESSION_FILE
    if path.exists():
        path.unlink()
