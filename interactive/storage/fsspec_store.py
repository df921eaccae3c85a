"""A store behind an fsspec URL (``s3://``, ``gs://``, ``hdfs://``, ``memory://``...).

- Object stores (S3, GCS, Azure, memory): one ``PUT`` of a whole object is already
  atomic, so the object is written once under its final name.
- Other remote file systems (HDFS, SFTP...): a temporary name, then a rename.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interactive.storage import mirror
from interactive.storage.store import (
    PARTIAL_SUFFIX,
    Chunk,
    StoreError,
    clean_path,
    guarded,
)

OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory"})
"""Protocols where writing one whole object is atomic, so no rename is needed."""
DRIVERS = {"s3": ("s3", "s3fs"), "s3a": ("s3", "s3fs"), "gs": ("gcs", "gcsfs"),
           "gcs": ("gcs", "gcsfs"), "hdfs": ("hdfs", "pyarrow")}
"""Protocol → (podcode's extra, the package it adds)."""
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def remote_fs(url: str) -> Any:
    """The fsspec file system of ``url``; a :class:`StoreError` naming the extra to install
    when its driver is missing."""
    import fsspec.core

    protocol = url.split("://", 1)[0]
    try:
        fs, _ = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise StoreError(url, "", "open", f"{missing_driver(protocol)} ({exc}).") from exc
    except ValueError as exc:
        raise StoreError(url, "", "open", f"Check PODCODE_STORE ({exc}).") from exc
    return fs


def missing_driver(protocol: str) -> str:
    """What to install for ``protocol``: the package itself (podcode is installed from a
    checkout or a wheel, so ``pip install podcode[s3]`` cannot find it on an index)."""
    extra, package = DRIVERS.get(protocol, (None, None))
    if package is None:
        return f"Install the fsspec driver for {protocol}://"
    return (f"Install {package}: pip install {package} (or podcode's extra from its "
            f"checkout: pip install './podcode[{extra}]')")


class FsspecStore:
    """A :class:`~interactive.storage.store.Store` at ``url`` on the fsspec file system
    ``fs``."""

    def __init__(self, url: str, fs: Any) -> None:
        self.url = url.rstrip("/")
        """The store's root URL."""
        self.fs = fs

    def __repr__(self) -> str:
        return f"FsspecStore({self.url!r})"

    @property
    def is_local(self) -> bool:
        return False

    def url_for(self, rel_path: str) -> str:
        return f"{self.url}/{clean_path(rel_path)}"

    def local_path(self, rel_path: str) -> Path:
        raise StoreError(self.url, rel_path, "map to a local path", "Use sync_down first.")

    # -- writing -----------------------------------------------------------------

    def put_bytes(self, rel_path: str, data: Chunk, *, durable: bool = True) -> None:
        self.put_chunks(rel_path, [data], durable=durable)

    def put_chunks(self, rel_path: str, chunks: Sequence[Chunk], *, durable: bool = True) -> None:
        target = self.url_for(rel_path)
        guarded(self.url, rel_path, "write", lambda: self._put(target, chunks, None))

    def put_file(self, rel_path: str, local: Path) -> None:
        target = self.url_for(rel_path)
        guarded(self.url, rel_path, "write", lambda: self._put(target, None, Path(local)))

    def _put(self, target: str, chunks: Sequence[Chunk] | None, local: Path | None) -> None:
        if _protocols(self.fs) & OBJECT_STORES:
            self._upload(target, chunks, local)
            return
        temp = f"{target}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}"
        try:
            self.fs.makedirs(self.fs._parent(target), exist_ok=True)
            self._upload(temp, chunks, local)
            self.fs.mv(temp, target)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm_file(temp)
            raise

    def _upload(self, url: str, chunks: Sequence[Chunk] | None, local: Path | None) -> None:
        """One whole-object upload: nothing is visible under ``url`` until it completes."""
        if local is None:
            self.fs.pipe_file(url, b"".join(chunks or ()))
        else:
            self.fs.put_file(str(local), url)

    def make_dir(self, rel_dir: str) -> None:
        """Remote stores need no folders."""

    # -- reading -----------------------------------------------------------------

    def get_bytes(self, rel_path: str) -> bytes | None:
        url = self.url_for(rel_path)

        def read() -> bytes | None:
            try:
                data: bytes = self.fs.cat_file(url)
            except _MISSING:
                return None
            return data

        return guarded(self.url, rel_path, "read", read)

    def get_buffer(self, rel_path: str) -> bytearray | None:
        data = self.get_bytes(rel_path)
        return None if data is None else bytearray(data)

    def exists(self, rel_path: str) -> bool:
        url = self.url_for(rel_path)
        return bool(guarded(self.url, rel_path, "read", lambda: self.fs.isfile(url)))

    def delete(self, rel_path: str) -> None:
        url = self.url_for(rel_path)

        def remove() -> None:
            if self.fs.exists(url):
                self.fs.rm_file(url)

        guarded(self.url, rel_path, "delete", remove)

    def list_files(self, rel_dir: str) -> dict[str, str]:
        base = self.url_for(rel_dir)

        def listing() -> dict[str, Any]:
            if not self.fs.exists(base):
                return {}
            found: dict[str, Any] = self.fs.find(base, detail=True)
            return found

        prefix = self.fs._strip_protocol(base).rstrip("/") + "/"
        found = guarded(self.url, rel_dir, "list", listing)
        return {
            name[len(prefix) :]: mirror.stamp(info)
            for name, info in found.items()
            if name.startswith(prefix) and not name.endswith(PARTIAL_SUFFIX)
        }

    def sync_up(self, local_dir: Path, rel_dir: str) -> None:
        mirror.sync_up(self, local_dir, rel_dir)

    def sync_down(self, rel_dir: str, local_dir: Path) -> None:
        mirror.sync_down(self, rel_dir, local_dir)


def _protocols(fs: Any) -> set[str]:
    protocol = fs.protocol
    return {protocol} if isinstance(protocol, str) else set(protocol)
