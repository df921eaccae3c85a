"""A local mirror of a store's folder, synced incrementally both ways.

A manifest in the mirror (``.podcode-sync.json``) remembers what was last exchanged:
each local file's size and modification time, and each store file's change stamp, so
that a sync moves only what changed. Files being written (``*.partial``) are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from interactive.base.files import TEMP_SUFFIX, atomic_open, write_bytes
from interactive.storage.store import Store

MANIFEST_NAME = ".podcode-sync.json"
"""What a local mirror last exchanged with the store (for incremental sync)."""
_STAMP_KEYS = (
    *("ETag", "etag", "md5Hash", "generation"),
    *("mtime", "LastModified", "updated", "created"),
)
"""Keys of fsspec's file info that change when a file changes, best first."""


def sync_up(store: Store, local_dir: Path, rel_dir: str) -> None:
    """Upload what changed in ``local_dir`` since the last sync to ``rel_dir``.

    Files removed locally since the last sync are removed from the store too.
    """
    manifest = Manifest.load(local_dir)
    for rel, stat in local_files(local_dir).items():
        if manifest.local.get(rel) != stat:
            store.put_file(f"{rel_dir}/{rel}", local_dir / rel)
            manifest.local[rel] = stat
            manifest.remote[rel] = ""
    for rel in sorted(set(manifest.local) - set(local_files(local_dir))):
        store.delete(f"{rel_dir}/{rel}")
        manifest.forget(rel)
    remote = store.list_files(rel_dir)
    manifest.remote.update({rel: remote[rel] for rel in manifest.local if rel in remote})
    manifest.save(local_dir)


def sync_down(store: Store, rel_dir: str, local_dir: Path) -> None:
    """Download what changed in ``rel_dir`` since the last sync into ``local_dir``.

    A local file is replaced only when the store's copy changed since the last sync (or
    the local file is missing): the store's copy wins then.
    """
    local_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.load(local_dir)
    local = local_files(local_dir)
    for rel, stamp in store.list_files(rel_dir).items():
        if manifest.remote.get(rel) == stamp and rel in local:
            continue
        target = local_dir.joinpath(*PurePosixPath(rel).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = store.get_bytes(f"{rel_dir}/{rel}")
        if data is None:
            continue
        write_bytes(target, data)
        manifest.local[rel] = stat_of(target)
        manifest.remote[rel] = stamp
    manifest.save(local_dir)


def stat_of(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_size, info.st_mtime_ns]


def local_files(folder: Path) -> dict[str, list[int]]:
    """Relative POSIX path -> [size, mtime_ns] of every finished file under ``folder``."""
    if not folder.is_dir():
        return {}
    return {
        path.relative_to(folder).as_posix(): stat_of(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME and not path.name.endswith(TEMP_SUFFIX)
    }


def stamp(info: Mapping[str, Any]) -> str:
    """What changes when a remote file changes: size plus the backend's version marker."""
    marker: Any = None
    for key in _STAMP_KEYS:
        if info.get(key) is not None:
            marker = info[key]
            break
    if isinstance(marker, datetime):
        marker = marker.timestamp()
    return f"{info.get('size')}:{marker}"


@dataclass
class Manifest:
    local: dict[str, list[int]]
    remote: dict[str, str]

    @classmethod
    def load(cls, folder: Path) -> Manifest:
        try:
            data = json.loads((folder / MANIFEST_NAME).read_text())
            return cls(local=dict(data["local"]), remote=dict(data["remote"]))
        except (OSError, ValueError, KeyError, TypeError):
            return cls(local={}, remote={})

    def forget(self, rel: str) -> None:
        self.local.pop(rel, None)
        self.remote.pop(rel, None)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_open(folder / MANIFEST_NAME, "w") as handle:
            json.dump({"local": self.local, "remote": self.remote}, handle, sort_keys=True)
