"""The store: a folder that outlives the pod (``PODCODE_STORE``, an fsspec URL).

One protocol, :class:`Store`, and two kinds behind it, chosen by
:func:`interactive.storage.backends.open_store`:

- :class:`~interactive.storage.local_store.LocalStore`: a local path (or ``file://``),
  used directly;
- :class:`~interactive.storage.fsspec_store.FsspecStore`: any other URL (``s3://``,
  ``gs://``, ``hdfs://``, ``memory://``...), through fsspec.

Every write is atomic: a reader sees the old file or the new one, never half of one.
Failures raise :class:`StoreError` naming the store, the path and what to do, and
leave no temporary file behind.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol, TypeVar

from interactive.base.errors import PodcodeError
from interactive.base.files import TEMP_SUFFIX
from interactive.base.settings import podcode_home

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = TEMP_SUFFIX
"""Suffix of a file being written; never synced, never read as a finished file."""
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


class Store(Protocol):
    """A folder addressed by relative POSIX paths (``cache/train/ab12.pkl``)."""

    url: str
    """The store's root: an absolute local path, or an fsspec URL."""

    @property
    def is_local(self) -> bool:
        """Whether the store is a local folder (:meth:`local_path` works)."""
        ...

    def url_for(self, rel_path: str) -> str:
        """Where ``rel_path`` lives: a local path or a full URL."""
        ...

    def local_path(self, rel_path: str) -> Path:
        """The local path of ``rel_path`` (local stores only; else :class:`StoreError`)."""
        ...

    def put_bytes(self, rel_path: str, data: Chunk, *, durable: bool = True) -> None:
        """Write ``data`` to ``rel_path`` atomically.

        ``durable=False`` skips the ``fsync`` of a local file: still atomic, but after a
        machine crash the file may be empty or short (for data checked on reading).
        """
        ...

    def put_chunks(self, rel_path: str, chunks: Sequence[Chunk], *, durable: bool = True) -> None:
        """Write ``chunks`` one after the other to ``rel_path`` atomically (no joined copy)."""
        ...

    def put_file(self, rel_path: str, local: Path) -> None:
        """Copy the local file ``local`` to ``rel_path`` atomically."""
        ...

    def make_dir(self, rel_dir: str) -> None:
        """Create a folder (and its parents) where the store needs one."""
        ...

    def get_bytes(self, rel_path: str) -> bytes | None:
        """The content of ``rel_path``, or None when there is no such file."""
        ...

    def get_buffer(self, rel_path: str) -> bytearray | None:
        """Like :meth:`get_bytes`, into a writable buffer (arrays built on it are writable)."""
        ...

    def exists(self, rel_path: str) -> bool:
        """Whether ``rel_path`` is a file."""
        ...

    def delete(self, rel_path: str) -> None:
        """Remove one file; a missing one is fine."""
        ...

    def list_files(self, rel_dir: str) -> dict[str, str]:
        """Relative path -> change stamp of every finished file under ``rel_dir``."""
        ...

    def sync_up(self, local_dir: Path, rel_dir: str) -> None:
        """Upload what changed in ``local_dir`` since the last sync to ``rel_dir``
        (:func:`interactive.storage.mirror.sync_up`)."""
        ...

    def sync_down(self, rel_dir: str, local_dir: Path) -> None:
        """Download what changed in ``rel_dir`` since the last sync into ``local_dir``
        (:func:`interactive.storage.mirror.sync_down`)."""
        ...


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


def clean_path(rel_path: str) -> str:
    """Reject absolute paths and ``..`` so a key never escapes the store."""
    parts = PurePosixPath(rel_path.replace("\\", "/")).parts
    if not parts or rel_path.startswith("/") or ".." in parts:
        raise ValueError(f"store paths are relative and stay inside the store: {rel_path!r}")
    return "/".join(part for part in parts if part != ".")


def advice(exc: BaseException) -> str:
    """What to do about ``exc``, for a :class:`StoreError`."""
    if isinstance(exc, PermissionError):
        return "Make it writable for this user, or set PODCODE_STORE to a writable location."
    if isinstance(exc, (NotADirectoryError, FileExistsError)):
        return "A file stands where a folder is needed; set PODCODE_STORE to a folder."
    if isinstance(exc, FileNotFoundError):
        return "Create it (for a bucket: create the bucket), or fix PODCODE_STORE."
    return f"Check PODCODE_STORE and the store's credentials and free space ({exc})."


def guarded(url: str, rel_path: str, action: str, call: Callable[[], T]) -> T:
    """``call()``, its failure raised as a :class:`StoreError` (a bad path stays ValueError)."""
    try:
        return call()
    except (StoreError, ValueError):
        raise
    except Exception as exc:  # fsspec drivers raise their own errors besides OSError
        raise StoreError(url, rel_path, action, advice(exc)) from exc


def short_lived_store(*, mailed: bool, environ: Mapping[str, str] | None = None) -> str | None:
    """What to tell the engineer when the fixes go to a folder inside the pod (gone with
    it unless it is a persistent volume); None when the store outlives the pod."""
    environ = os.environ if environ is None else environ
    url = store_url(environ)
    if local_root(url) is None or not environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    fallback = ", and mailed to the owner" if mailed else ""
    return (
        f"your fixes are saved to {url}, inside this pod{fallback}: unless that folder is a "
        "persistent volume, set PODCODE_STORE to a bucket (s3://, gs://) to keep them "
        "after the pod ends"
    )
