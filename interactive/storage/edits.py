"""The engineer's edits, saved to the store so that they outlive the pod.

``edits/<task>/<UTC time>/`` holds ``changes.diff``, ``manifest.json`` and the changed
files under ``files/``; ``edits/<task>/latest.diff`` is the last patch (``podcode edits``).
The patch's paths are relative to the git checkout's root, so ``git apply`` takes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from interactive.base.names import folder_name

logger = logging.getLogger(__name__)

EDITS = "edits"
"""Top folder of saved edits in the store."""
MAX_EDIT_FILE_BYTES = 64 * 1024 * 1024
"""A changed file larger than this is listed in the manifest but not copied."""


class WorkspaceChanges(Protocol):
    """What :class:`interactive.storage.workspace.Snapshot` offers."""

    root: Path

    def changed(self) -> list[str]: ...

    def diff(self, paths: list[str] | None = None, prefix: str = "") -> str: ...


class EditStore(Protocol):
    """What :class:`interactive.storage.store.Store` offers."""

    def put_file(self, rel_path: str, local: Path) -> None: ...

    def put_bytes(self, rel_path: str, data: bytes) -> None: ...

    def url_for(self, rel_path: str) -> str: ...


@dataclass(frozen=True)
class SavedEdits:
    url: str
    """The store URL of the folder the edits went to."""
    changed: list[str]
    too_large: list[str]
    """Changed files over :data:`MAX_EDIT_FILE_BYTES`: listed, not copied."""


def edits_folder(task: str, when: float) -> str:
    """``edits/<task>/<YYYYmmddTHHMMSSZ>`` (the task name made path-safe)."""
    stamp = datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{_task_edits(task)}/{stamp}"


def latest_patch(task: str) -> str:
    """``edits/<task>/latest.diff``: the last patch saved for the task (``podcode edits``)."""
    return f"{_task_edits(task)}/latest.diff"


def _task_edits(task: str) -> str:
    return f"{EDITS}/{folder_name(task)}"


def save_edits(snapshot: WorkspaceChanges, store: EditStore, task: str, when: float) -> SavedEdits:
    """Copy the changed files, the diff and a manifest to the store."""
    folder = edits_folder(task, when)
    changed = snapshot.changed()
    deleted: list[str] = []
    copied: list[str] = []
    too_large: list[str] = []
    for rel in changed:
        path = snapshot.root / rel
        if not path.is_file():
            deleted.append(rel)
        elif path.stat().st_size > MAX_EDIT_FILE_BYTES:
            too_large.append(rel)
        else:
            store.put_file(f"{folder}/files/{Path(rel).as_posix()}", path)
            copied.append(rel)
    patch = snapshot.diff(changed, prefix=git_prefix(snapshot.root)).encode()
    store.put_bytes(f"{folder}/changes.diff", patch)
    store.put_bytes(f"{latest_patch(task)}", patch)
    manifest = _manifest(task, snapshot.root, when, copied, deleted, too_large)
    store.put_bytes(f"{folder}/manifest.json", manifest)
    url = store.url_for(folder)
    logger.info("saved %d changed files of %s to %s", len(copied), snapshot.root, url)
    return SavedEdits(url, list(changed), too_large)


def _manifest(
    task: str, root: Path, when: float, copied: Sequence[str], deleted: Sequence[str],
    skipped: Sequence[str],
) -> bytes:
    record = {
        "task": task,
        "workspace": str(root),
        "saved_at": datetime.fromtimestamp(when, tz=timezone.utc).isoformat(),
        "copied": list(copied),
        "deleted": list(deleted),
        "too_large": list(skipped),
        "max_file_bytes": MAX_EDIT_FILE_BYTES,
    }
    return (json.dumps(record, indent=2) + "\n").encode()


def git_prefix(root: Path) -> str:
    """``root``'s path inside its git checkout, with a trailing slash ("" at the top or
    outside git), so that a diff of the workspace applies at the checkout's root."""
    root = root.resolve()
    for folder in (root, *root.parents):
        if (folder / ".git").exists():
            rel = root.relative_to(folder).as_posix()
            return "" if rel == "." else rel + "/"
    return ""
