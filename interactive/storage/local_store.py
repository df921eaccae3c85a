"""A store in a local folder (``PODCODE_STORE`` a path or ``file://``).

Writes go through :func:`interactive.base.files.atomic_open`: a temporary file in the
same folder, flushed to disk, moved over the target with ``os.replace``.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from interactive.base.files import atomic_open
from interactive.storage import mirror
from interactive.storage.store import Chunk, clean_path, guarded

STORE_MARKER = ".podcode-store"
"""An empty file at the root of every local store podcode wrote to: a store found inside a
workspace is never taken for the engineer's edits (:mod:`interactive.storage.workspace`)."""
_COPY_CHUNK = 1024 * 1024
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


class LocalStore:
    """A :class:`~interactive.storage.store.Store` in the local folder ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = str(self.root)
        """The folder, as an absolute path."""
        self._marked = False

    def __repr__(self) -> str:
        return f"LocalStore({self.url!r})"

    @property
    def is_local(self) -> bool:
        return True

    def url_for(self, rel_path: str) -> str:
        return str(self.local_path(rel_path))

    def local_path(self, rel_path: str) -> Path:
        return self.root.joinpath(*PurePosixPath(clean_path(rel_path)).parts)

    # -- writing -----------------------------------------------------------------

    def _mark(self) -> None:
        """Put :data:`STORE_MARKER` at the root (once per store object; best effort)."""
        if self._marked:
            return
        self._marked = True
        marker = self.root / STORE_MARKER
        if not marker.exists():
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                marker.touch(mode=0o600)
            except OSError:
                pass  # the write that follows says what is wrong with the folder

    def put_bytes(self, rel_path: str, data: Chunk, *, durable: bool = True) -> None:
        self.put_chunks(rel_path, [data], durable=durable)

    def put_chunks(self, rel_path: str, chunks: Sequence[Chunk], *, durable: bool = True) -> None:
        target = self.local_path(rel_path)

        def write() -> None:
            self._mark()
            target.parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(target, durable=durable) as out:
                for chunk in chunks:
                    out.write(chunk)

        guarded(self.url, rel_path, "write", write)

    def put_file(self, rel_path: str, local: Path) -> None:
        target = self.local_path(rel_path)

        def copy() -> None:
            self._mark()
            target.parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(target) as out, open(local, "rb") as source:
                shutil.copyfileobj(source, out, _COPY_CHUNK)

        guarded(self.url, rel_path, "write", copy)

    def make_dir(self, rel_dir: str) -> None:
        folder = self.local_path(rel_dir)

        def create() -> None:
            self._mark()
            folder.mkdir(parents=True, exist_ok=True)

        guarded(self.url, rel_dir, "create", create)

    # -- reading -----------------------------------------------------------------

    def get_bytes(self, rel_path: str) -> bytes | None:
        path = self.local_path(rel_path)

        def read() -> bytes | None:
            try:
                return path.read_bytes()
            except _MISSING:
                return None

        return guarded(self.url, rel_path, "read", read)

    def get_buffer(self, rel_path: str) -> bytearray | None:
        path = self.local_path(rel_path)

        def read() -> bytearray | None:
            try:
                with open(path, "rb") as handle:
                    return _read_into(handle)
            except _MISSING:
                return None

        return guarded(self.url, rel_path, "read", read)

    def exists(self, rel_path: str) -> bool:
        return self.local_path(rel_path).is_file()

    def delete(self, rel_path: str) -> None:
        path = self.local_path(rel_path)
        guarded(self.url, rel_path, "delete", lambda: path.unlink(missing_ok=True))

    def list_files(self, rel_dir: str) -> dict[str, str]:
        files = mirror.local_files(self.local_path(rel_dir))
        return {rel: repr(stat) for rel, stat in files.items()}

    def sync_up(self, local_dir: Path, rel_dir: str) -> None:
        mirror.sync_up(self, local_dir, rel_dir)

    def sync_down(self, rel_dir: str, local_dir: Path) -> None:
        mirror.sync_down(self, rel_dir, local_dir)


def _read_into(handle: io.BufferedReader) -> bytearray:
    """The whole open file in a new writable buffer, read once (no second copy)."""
    buffer = bytearray(os.fstat(handle.fileno()).st_size)
    view = memoryview(buffer)
    filled = 0
    while filled < len(buffer):
        count = handle.readinto(view[filled:])
        if not count:
            break
        filled += count
    return buffer[:filled] if filled < len(buffer) else buffer
