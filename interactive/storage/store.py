"""The store: a folder that outlives the pod (``PODCODE_STORE``, an fsspec URL).

A local path (or ``file://``) is used directly; any other URL (``s3://``,
``gs://``, ``hdfs://``, ``memory://``...) goes through fsspec. Every write is
atomic: a reader sees the old file or the new one, never half of one.

- Local folders: the data goes to a temporary name in the same folder, is
  flushed to disk, and is moved over the target with ``os.replace``.
- Object stores (S3, GCS, Azure, memory): one ``PUT`` of a whole object is
  already atomic, so the object is written once under its final name.
- Other remote file systems (HDFS, SFTP...): a temporary name, then a rename.

Failures raise :class:`StoreError` naming the store, the path and what to do,
and leave no temporary file behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from interactive.base.errors import PodcodeError
from interactive.base.settings import podcode_home

logger = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
"""Suffix of a file being written; never synced, never read as a finished file."""
MANIFEST_NAME = ".podcode-sync.json"
"""What a local mirror last exchanged with the store (for incremental sync)."""
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory"})
"""Protocols where writing one whole object is atomic, so no rename is needed."""
EXTRAS = {
    "s3": "podcode[s3] (s3fs)",
    "s3a": "podcode[s3] (s3fs)",
    "gs": "podcode[gcs] (gcsfs)",
    "gcs": "podcode[gcs] (gcsfs)",
    "hdfs": "podcode[hdfs] (pyarrow)",
}

_STAMP_KEYS = (
    *("ETag", "etag", "md5Hash", "generation"),
    *("mtime", "LastModified", "updated", "created"),
)
"""Keys of fsspec's file info that change when a file changes, best first."""
T = TypeVar("T")
Chunk = bytes | bytearray | memoryview


class StoreError(PodcodeError):
    """The store could not be read or written; the message names the URL and the path."""

    def __init__(self, url: str, path: str, reason: str, advice: str) -> None:
        self.url = url
        self.path = path
        self.reason = reason
        what = repr(path) if path else "it"
        super().__init__(f"podcode store {url!r} (PODCODE_STORE): cannot {reason} {what}. {advice}")


def store_url(environ: Mapping[str, str] | None = None) -> str:
    """``$PODCODE_STORE``, else ``$PODCODE_HOME/store``."""
    environ = os.environ if environ is None else environ
    raw = (environ.get("PODCODE_STORE") or "").strip()
    return raw or str(podcode_home(environ) / "store")


def local_root(url: str) -> Path | None:
    """The folder of a local store URL (a path or ``file://``), None for a remote one."""
    if url.startswith("file://"):
        return Path(url[len("file://") :]).expanduser().absolute()
    if "://" in url:
        return None
    return Path(url).expanduser().absolute()


def open_store(environ: Mapping[str, str] | None = None) -> Store:
    """Open the store named by ``PODCODE_STORE`` (default ``$PODCODE_HOME/store``)."""
    url = store_url(environ)
    root = local_root(url)
    if root is not None:
        return Store(url=str(root), local_root=root)
    return Store(url=url.rstrip("/"), fs=_remote_fs(url))


def _remote_fs(url: str) -> Any:
    import fsspec.core

    protocol = url.split("://", 1)[0]
    try:
        fs, _ = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        extra = EXTRAS.get(protocol, f"the fsspec driver for {protocol}://")
        raise StoreError(
            url, "", "open", f"Install {extra}: pip install '{extra.split(' ')[0]}' ({exc})."
        ) from exc
    except ValueError as exc:
        raise StoreError(url, "", "open", f"Check PODCODE_STORE ({exc}).") from exc
    return fs


def _advice(exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return "Make it writable for this user, or set PODCODE_STORE to a writable location."
    if isinstance(exc, (NotADirectoryError, FileExistsError)):
        return "A file stands where a folder is needed; set PODCODE_STORE to a folder."
    if isinstance(exc, FileNotFoundError):
        return "Create it (for a bucket: create the bucket), or fix PODCODE_STORE."
    return f"Check PODCODE_STORE and the store's credentials and free space ({exc})."


@dataclass
class Store:
    """A folder addressed by relative POSIX paths (``cache/train/ab12.pkl``)."""

    url: str
    """The store's root: an absolute local path, or an fsspec URL."""
    local_root: Path | None = None
    """Set for a local store."""
    fs: Any = None
    """The fsspec file system of a remote store."""

    @property
    def is_local(self) -> bool:
        return self.local_root is not None

    def url_for(self, rel_path: str) -> str:
        """Where ``rel_path`` lives: a local path or a full URL."""
        rel = _clean(rel_path)
        if self.local_root is not None:
            return str(self.local_root.joinpath(*PurePosixPath(rel).parts))
        return f"{self.url}/{rel}"

    def local_path(self, rel_path: str) -> Path:
        """The local path of ``rel_path`` (local stores only)."""
        if self.local_root is None:
            raise StoreError(self.url, rel_path, "map to a local path", "Use sync_down first.")
        return Path(self.url_for(rel_path))

    # -- writing -----------------------------------------------------------------

    def put_bytes(self, rel_path: str, data: Chunk, *, durable: bool = True) -> None:
        """Write ``data`` to ``rel_path`` atomically.

        ``durable=False`` skips the ``fsync`` of a local file: still atomic, but
        after a machine crash the file may be empty or short (for data that is
        checked on reading, such as cache entries).
        """
        self.put_chunks(rel_path, [data], durable=durable)

    def put_chunks(self, rel_path: str, chunks: Sequence[Chunk], *, durable: bool = True) -> None:
        """Write ``chunks`` one after the other to ``rel_path`` atomically (no joined copy)."""
        self._guard(rel_path, "write", lambda: self._put(rel_path, chunks, None, durable))

    def put_file(self, rel_path: str, local: Path) -> None:
        """Copy the local file ``local`` to ``rel_path`` atomically."""
        self._guard(rel_path, "write", lambda: self._put(rel_path, None, Path(local), True))

    def _put(
        self, rel_path: str, chunks: Sequence[Chunk] | None, local: Path | None, durable: bool
    ) -> None:
        rel = _clean(rel_path)
        if self.local_root is not None:
            target = self.local_path(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(target, durable=durable) as out:
                if local is not None:
                    with open(local, "rb") as src:
                        shutil.copyfileobj(src, out, 1024 * 1024)
                for chunk in chunks or ():
                    out.write(chunk)
            return
        target_url = self.url_for(rel)
        if _protocols(self.fs) & OBJECT_STORES:
            self._upload(target_url, chunks, local)
            return
        tmp = f"{target_url}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}"
        try:
            self.fs.makedirs(self.fs._parent(target_url), exist_ok=True)
            self._upload(tmp, chunks, local)
            self.fs.mv(tmp, target_url)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm_file(tmp)
            raise

    def _upload(self, url: str, chunks: Sequence[Chunk] | None, local: Path | None) -> None:
        """One whole-object upload: nothing is visible under ``url`` until it completes."""
        if local is None:
            self.fs.pipe_file(url, b"".join(chunks or ()))
        else:
            self.fs.put_file(str(local), url)

    def make_dir(self, rel_dir: str) -> None:
        """Create a folder (and its parents) in a local store; remote stores need none."""
        if self.local_root is not None:
            folder = self.local_path(rel_dir)
            self._guard(rel_dir, "create", lambda: folder.mkdir(parents=True, exist_ok=True))

    # -- reading -----------------------------------------------------------------

    def get_bytes(self, rel_path: str) -> bytes | None:
        """The content of ``rel_path``, or None when there is no such file."""

        def read() -> bytes | None:
            try:
                if self.local_root is not None:
                    return self.local_path(rel_path).read_bytes()
                data: bytes = self.fs.cat_file(self.url_for(rel_path))
                return data
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return None

        return self._guard(rel_path, "read", read)

    def get_buffer(self, rel_path: str) -> bytearray | None:
        """Like :meth:`get_bytes`, into a writable buffer (arrays built on it are writable)."""

        def read() -> bytearray | None:
            try:
                if self.local_root is None:
                    return bytearray(self.fs.cat_file(self.url_for(rel_path)))
                with open(self.local_path(rel_path), "rb") as fh:
                    buffer = bytearray(os.fstat(fh.fileno()).st_size)
                    view = memoryview(buffer)
                    filled = 0
                    while filled < len(buffer):
                        count = fh.readinto(view[filled:])
                        if not count:
                            break
                        filled += count
                    return buffer[:filled] if filled < len(buffer) else buffer
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return None

        return self._guard(rel_path, "read", read)

    def exists(self, rel_path: str) -> bool:
        if self.local_root is not None:
            return self.local_path(rel_path).is_file()
        return bool(self._guard(rel_path, "read", lambda: self.fs.isfile(self.url_for(rel_path))))

    def delete(self, rel_path: str) -> None:
        """Remove one file; a missing one is fine."""

        def remove() -> None:
            if self.local_root is not None:
                self.local_path(rel_path).unlink(missing_ok=True)
            elif self.fs.exists(self.url_for(rel_path)):
                self.fs.rm_file(self.url_for(rel_path))

        self._guard(rel_path, "delete", remove)

    # -- mirrors of remote folders -------------------------------------------------

    def sync_up(self, local_dir: Path, rel_dir: str) -> None:
        """Upload what changed in ``local_dir`` since the last sync to ``rel_dir``.

        Files removed locally since the last sync are removed from the store too;
        files being written (``*.partial``) are skipped.
        """
        manifest = _Manifest.load(local_dir)
        for rel, stat in _local_files(local_dir).items():
            if manifest.local.get(rel) != stat:
                self.put_file(f"{rel_dir}/{rel}", local_dir / rel)
                manifest.local[rel] = stat
                manifest.remote[rel] = ""
        for rel in sorted(set(manifest.local) - set(_local_files(local_dir))):
            self.delete(f"{rel_dir}/{rel}")
            manifest.forget(rel)
        remote = self._remote_files(rel_dir)
        manifest.remote.update({rel: remote[rel] for rel in manifest.local if rel in remote})
        manifest.save(local_dir)

    def sync_down(self, rel_dir: str, local_dir: Path) -> None:
        """Download what changed in ``rel_dir`` since the last sync into ``local_dir``.

        A local file is replaced only when the store's copy changed since the last
        sync (or the local file is missing): the store's copy wins then.
        """
        local_dir.mkdir(parents=True, exist_ok=True)
        manifest = _Manifest.load(local_dir)
        local = _local_files(local_dir)
        for rel, stamp in self._remote_files(rel_dir).items():
            if manifest.remote.get(rel) == stamp and rel in local:
                continue
            target = local_dir.joinpath(*PurePosixPath(rel).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = self.get_bytes(f"{rel_dir}/{rel}")
            if data is None:
                continue
            with atomic_open(target) as fh:
                fh.write(data)
            manifest.local[rel] = _stat(target)
            manifest.remote[rel] = stamp
        manifest.save(local_dir)

    def _remote_files(self, rel_dir: str) -> dict[str, str]:
        """Relative path -> change stamp of every finished file under ``rel_dir``."""
        base = self.url_for(rel_dir)
        if self.local_root is not None:
            return {rel: repr(stat) for rel, stat in _local_files(Path(base)).items()}

        def listing() -> dict[str, Any]:
            if not self.fs.exists(base):
                return {}
            found: dict[str, Any] = self.fs.find(base, detail=True)
            return found

        prefix = self.fs._strip_protocol(base).rstrip("/") + "/"
        found = self._guard(rel_dir, "list", listing)
        return {
            name[len(prefix) :]: _stamp(info)
            for name, info in found.items()
            if name.startswith(prefix) and not name.endswith(PARTIAL_SUFFIX)
        }

    def _guard(self, rel_path: str, action: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except (StoreError, ValueError):
            raise
        except Exception as exc:  # fsspec drivers raise their own errors besides OSError
            raise StoreError(self.url, rel_path, action, _advice(exc)) from exc


def _protocols(fs: Any) -> set[str]:
    protocol = fs.protocol
    return {protocol} if isinstance(protocol, str) else set(protocol)


def _clean(rel_path: str) -> str:
    """Reject absolute paths and ``..`` so a key never escapes the store."""
    parts = PurePosixPath(rel_path.replace("\\", "/")).parts
    if not parts or rel_path.startswith("/") or ".." in parts:
        raise ValueError(f"store paths are relative and stay inside the store: {rel_path!r}")
    return "/".join(part for part in parts if part != ".")


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "wb", *, durable: bool = True) -> Iterator[Any]:
    """Open a temporary file next to ``path``; on success it replaces ``path``.

    The data is flushed and (``durable``) fsync'ed before ``os.replace``, so
    after a crash the file is either the old one or the complete new one. On an
    exception the temporary file is removed and ``path`` is untouched.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open writes whole files: mode 'wb' or 'w', not {mode!r}")
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _stat(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_size, info.st_mtime_ns]


def _local_files(folder: Path) -> dict[str, list[int]]:
    """Relative POSIX path -> [size, mtime_ns] of every finished file under ``folder``."""
    if not folder.is_dir():
        return {}
    return {
        path.relative_to(folder).as_posix(): _stat(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME and not path.name.endswith(PARTIAL_SUFFIX)
    }


def _stamp(info: Mapping[str, Any]) -> str:
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
class _Manifest:
    local: dict[str, list[int]]
    remote: dict[str, str]

    @classmethod
    def load(cls, folder: Path) -> _Manifest:
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
        with atomic_open(folder / MANIFEST_NAME, "w") as fh:
            json.dump({"local": self.local, "remote": self.remote}, fh, sort_keys=True)
