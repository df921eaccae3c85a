"""The engineer's edits, saved to the store so that they outlive the pod.

``edits/<task>/<UTC time>/`` holds ``changes.diff``, ``manifest.json`` and the changed
files under ``files/``; ``edits/<task>/latest.diff`` is the last patch (``podcode edits``).
The patch's paths are relative to the git checkout's root, so ``git apply`` takes it.

Any file name the workspace holds is saved: one the store cannot take as a path (a
backslash, as in ``..\\notes.txt``, a control character, bytes that are not UTF-8) goes
under ``quoted/`` with its bytes percent-encoded, and the manifest's ``stored_as`` maps
the name to that path. A file that cannot be saved at all is named in the manifest's
``failed`` (with why) and in the log; the others are saved all the same.

A save is bounded: at most :data:`MAX_SAVE_BYTES` and :data:`MAX_SAVE_FILES` in all (the
smallest changed files first, so that a large generated file never pushes the code out),
and it stops between two files at its ``deadline`` or when told to (``stop``: the session
ended, the pod is going). What it leaves out is named in the manifest's ``left_out``
(with why) and in the log. A save of the same changes into the same folder again writes
nothing (:class:`SaveLog`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
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
MAX_SAVE_BYTES = 256 * 1024 * 1024
"""At most this many bytes of changed files are copied by one save."""
MAX_SAVE_FILES = 10_000
"""At most this many changed files (copied or deleted) are saved by one save."""


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
class SaveLimits:
    """How much one save may do, and when it must stop."""

    max_bytes: int = MAX_SAVE_BYTES
    """Bytes of changed files copied, in all."""
    max_files: int = MAX_SAVE_FILES
    """Changed files saved (copied or noted deleted), in all."""
    deadline: float | None = None
    """``time.monotonic()`` after which no further file is copied (None: no deadline)."""
    stop: Callable[[], bool] | None = None
    """Asked between two files: True ends the save there (the session ended)."""

    def halted(self, now: float) -> str | None:
        """Why the save must stop now, or None."""
        if self.deadline is not None and now >= self.deadline:
            return "the save's time was up (the pod is going)"
        if self.stop is not None and self.stop():
            return "the session ended during the save"
        return None


@dataclass
class SaveLog:
    """What each folder last received (one per session): the same changes saved again
    into the same folder are not written again (each save of one folder is a change seen
    in the workspace, and a store inside the workspace is one)."""

    signatures: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SavedEdits:
    url: str
    """The store URL of the folder the edits went to."""
    changed: list[str]
    too_large: list[str]
    """Changed files over :data:`MAX_EDIT_FILE_BYTES`: listed, not copied."""
    failed: dict[str, str] = field(default_factory=dict)
    """Changed files that could not be copied, each with why."""
    left_out: dict[str, str] = field(default_factory=dict)
    """Changed files this save did not get to (over its bounds, out of time), each with
    why."""
    written: bool = True
    """False: the same changes were in the folder already, nothing was written."""


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
    left_out: dict[str, str] = field(default_factory=dict)
    halted: bool = False
    """The save stopped early (deadline, stop): it is not the whole of the changes."""
    files: int = 0
    bytes: int = 0

    def in_patch(self) -> list[str]:
        """The files the patch shows: those saved (each bounded), not those left out."""
        return sorted({*self.copied, *self.deleted, *self.too_large, *self.failed})


def _sizes(root: Path, changed: list[str]) -> dict[str, int | None]:
    """Each changed file's size (None: deleted, or not a file)."""
    sizes: dict[str, int | None] = {}
    for rel in changed:
        try:
            stat = os.stat(root / rel)
        except OSError:
            sizes[rel] = None
            continue
        sizes[rel] = stat.st_size if os.path.isfile(root / rel) else None
    return sizes


def _signature(root: Path, changed: list[str]) -> str:
    """What identifies these changes: each changed file's name, size and time stamp."""
    digest = hashlib.blake2b(digest_size=16)
    for rel in changed:
        try:
            stat = os.stat(root / rel)
            digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode(
                "utf-8", "surrogateescape"))
        except OSError:
            digest.update(f"{rel}\0-\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _bound(rel: str, size: int | None, done: _Copied, limits: SaveLimits) -> str | None:
    """Why ``rel`` (of ``size`` bytes to copy) does not fit in this save, or None."""
    if done.files >= limits.max_files:
        return f"over the {limits.max_files} files one save takes"
    if size is not None and size <= MAX_EDIT_FILE_BYTES and done.bytes + size > limits.max_bytes:
        return f"over the {limits.max_bytes} bytes one save copies"
    return None


def _copy_one(rel: str, size: int | None, root: Path, store: EditStore, folder: str,
              done: _Copied) -> None:
    """Copy one changed file (or note it deleted or too large); raises what the store or
    the file system raised."""
    path = root / rel
    done.files += 1
    if size is None:
        done.deleted.append(rel)
    elif size > MAX_EDIT_FILE_BYTES:
        done.too_large.append(rel)
    else:
        name = stored_name(rel)
        done.bytes += size
        store.put_file(f"{folder}/{name}", path)
        done.copied.append(rel)
        if not name.startswith("files/"):
            done.stored_as[rel] = name


def _copy_all(changed: list[str], root: Path, store: EditStore, folder: str,
              limits: SaveLimits, clock: Callable[[], float]) -> _Copied:
    """Copy the changed files within ``limits``: the smallest first (deleted ones cost
    nothing); what does not fit, or comes after a stop, is left out with why."""
    done = _Copied()
    sizes = _sizes(root, changed)
    halted: str | None = None
    for rel in sorted(changed, key=lambda r: (sizes[r] or 0, r)):
        halted = halted or limits.halted(clock())
        why = halted or _bound(rel, sizes[rel], done, limits)
        if why is not None:
            done.left_out[rel] = why
            continue
        try:
            _copy_one(rel, sizes[rel], root, store, folder, done)
        except (OSError, ValueError, StoreError) as exc:
            done.failed[rel] = str(exc)
            logger.warning("could not save the changed file %s of %s: %s", ascii(rel),
                           root, exc)
    done.halted = halted is not None
    return done


def save_edits(
    snapshot: WorkspaceChanges,
    store: EditStore,
    task: str,
    when: float,
    limits: SaveLimits | None = None,
    *,
    log: SaveLog | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SavedEdits:
    """Copy the changed files, the diff and a manifest to the store, within ``limits``. A
    file that cannot be copied is named (log, manifest, :attr:`SavedEdits.failed`), one
    left out too (:attr:`SavedEdits.left_out`); the others are saved. With ``log``, the
    same changes saved into the same folder before are not written again."""
    limits = limits or SaveLimits()
    folder = edits_folder(task, when)
    changed = snapshot.changed()
    signature = _signature(snapshot.root, changed)
    if log is not None and log.signatures.get(folder) == signature:
        return SavedEdits(store.url_for(folder), list(changed), [], written=False)
    done = _copy_all(changed, snapshot.root, store, folder, limits, clock)
    patch = snapshot.diff(done.in_patch(), prefix=git_prefix(snapshot.root)).encode(
        "utf-8", "surrogateescape")
    store.put_bytes(f"{folder}/changes.diff", patch)
    if not done.halted:  # a save cut short leaves the last whole patch in place
        store.put_bytes(f"{latest_patch(task)}", patch)
    store.put_bytes(f"{folder}/manifest.json", _manifest(task, snapshot.root, when, done,
                                                         limits))
    url = store.url_for(folder)
    logger.info("saved %d changed files of %s to %s", len(done.copied), snapshot.root, url)
    if done.left_out:
        logger.warning("%s", left_out_message(done.left_out, url))
    if log is not None and not done.halted and not done.failed:
        log.signatures[folder] = signature
    return SavedEdits(url, list(changed), done.too_large, done.failed, done.left_out)


def left_out_message(left_out: dict[str, str], url: str) -> str:
    """One line on what a save left out: how many files, why, and where they are listed."""
    reasons = sorted(set(left_out.values()))
    return (f"{len(left_out)} changed files were not saved to {url} ({'; '.join(reasons)}): "
            "its manifest.json lists them under left_out (a save copies the smallest "
            "files first)")


def _manifest(task: str, root: Path, when: float, done: _Copied, limits: SaveLimits) -> bytes:
    record = {
        "task": task,
        "workspace": str(root),
        "saved_at": datetime.fromtimestamp(when, tz=timezone.utc).isoformat(),
        "copied": sorted(done.copied),
        "deleted": sorted(done.deleted),
        "too_large": sorted(done.too_large),
        "stored_as": done.stored_as,
        "failed": done.failed,
        "left_out": done.left_out,
        "max_file_bytes": MAX_EDIT_FILE_BYTES,
        "max_save_bytes": limits.max_bytes,
        "max_save_files": limits.max_files,
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
