"""The engineer's edits, saved to the store so that they outlive the pod.

``edits/<task>/<UTC time>/`` holds ``changes.diff``, ``manifest.json`` and the changed
files under ``files/``; ``edits/<task>/latest.diff`` is the last patch (``podcode edits``).
The patch's paths are relative to the git checkout's root, so ``git apply`` takes it.

Any file name the workspace holds is saved: one the store cannot take as a path (a
backslash, as in ``..\\notes.txt``, a control character, bytes that are not UTF-8) goes
under ``quoted/`` with its bytes percent-encoded, and the manifest's ``stored_as`` maps
the name to that path. A file that cannot be saved at all is named in the manifest's
``failed`` (with why) and in the log; the others are saved all the same.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Protocol
from urllib.parse import quote

from interactive.base.names import folder_name
from interactive.storage.store import StoreError

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
    failed: dict[str, str] = field(default_factory=dict)
    """Changed files that could not be copied, each with why."""


def edits_folder(task: str, when: float) -> str:
    """``edits/<task>/<YYYYmmddTHHMMSSZ>`` (the task name made path-safe)."""
    stamp = datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{_task_edits(task)}/{stamp}"


def latest_patch(task: str) -> str:
    """``edits/<task>/latest.diff``: the last patch saved for the task (``podcode edits``)."""
    return f"{_task_edits(task)}/latest.diff"


def _task_edits(task: str) -> str:
    return f"{EDITS}/{folder_name(task)}"


def stored_name(rel: str) -> str:
    """Where the changed file ``rel`` goes in the edits folder: ``files/<rel>`` for a plain
    name; ``quoted/<its bytes percent-encoded>`` for one the store would refuse or read
    otherwise (a backslash, a control character, bytes that are not UTF-8)."""
    if rel.isprintable() and "\\" not in rel:
        parts = PurePosixPath(rel).parts
        if parts and "/".join(parts) == rel and not {".", ".."} & set(parts):
            return f"files/{rel}"
    return f"quoted/{quote(os.fsencode(rel), safe='/')}"


@dataclass
class _Copied:
    """What became of each changed file."""

    copied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    too_large: list[str] = field(default_factory=list)
    stored_as: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _copy_one(rel: str, root: Path, store: EditStore, folder: str, done: _Copied) -> None:
    """Copy one changed file (or note it deleted or too large); raises what the store or
    the file system raised."""
    path = root / rel
    if not path.is_file():
        done.deleted.append(rel)
    elif path.stat().st_size > MAX_EDIT_FILE_BYTES:
        done.too_large.append(rel)
    else:
        name = stored_name(rel)
        store.put_file(f"{folder}/{name}", path)
        done.copied.append(rel)
        if not name.startswith("files/"):
            done.stored_as[rel] = name


def save_edits(snapshot: WorkspaceChanges, store: EditStore, task: str, when: float) -> SavedEdits:
    """Copy the changed files, the diff and a manifest to the store. A file that cannot be
    copied is named (log, manifest, :attr:`SavedEdits.failed`); the others are saved."""
    folder = edits_folder(task, when)
    changed = snapshot.changed()
    done = _Copied()
    for rel in changed:
        try:
            _copy_one(rel, snapshot.root, store, folder, done)
        except (OSError, ValueError, StoreError) as exc:
            done.failed[rel] = str(exc)
            logger.warning("could not save the changed file %s of %s: %s", ascii(rel),
                           snapshot.root, exc)
    patch = snapshot.diff(changed, prefix=git_prefix(snapshot.root)).encode(
        "utf-8", "surrogateescape")
    store.put_bytes(f"{folder}/changes.diff", patch)
    store.put_bytes(f"{latest_patch(task)}", patch)
    store.put_bytes(f"{folder}/manifest.json", _manifest(task, snapshot.root, when, done))
    url = store.url_for(folder)
    logger.info("saved %d changed files of %s to %s", len(done.copied), snapshot.root, url)
    return SavedEdits(url, list(changed), done.too_large, done.failed)


def _manifest(task: str, root: Path, when: float, done: _Copied) -> bytes:
    record = {
        "task": task,
        "workspace": str(root),
        "saved_at": datetime.fromtimestamp(when, tz=timezone.utc).isoformat(),
        "copied": done.copied,
        "deleted": done.deleted,
        "too_large": done.too_large,
        "stored_as": done.stored_as,
        "failed": done.failed,
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
