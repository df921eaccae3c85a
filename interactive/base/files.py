"""Files written whole or not at all, and VS Code's JSON with comments.

Every podcode file is written the same way: the data goes to a temporary file
next to the target (created with ``O_EXCL`` and its final permissions, never
wider, even briefly), is flushed and ``fsync``'ed, and is moved over the target
with ``os.replace``; the folder is ``fsync``'ed too, so that after a crash the
target is the old file or the whole new one. On an error the temporary file is
removed and the target is untouched. Temporary files are named
``.<name>.<pid>.<random>.partial``: hidden, never taken for a finished file
(``*.partial`` is skipped by the store's sync), and a watchdog that outlives a
killed process finds those it left (:func:`temp_pattern`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".partial"
"""Suffix of a file being written: never read or synced as a finished file."""
PRIVATE = 0o600
"""Owner-only permissions (session records, the store, checkpoints)."""
_TEMP_ATTEMPTS = 16
_WRITE_MODES = ("wb", "w")
_STRINGS_AND_COMMENTS = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.DOTALL)
_STRINGS_AND_TRAILING_COMMAS = re.compile(r'"(?:\\.|[^"\\])*"|,(?=\s*[\]}])')


def temp_pattern(path: Path, pid: int) -> str:
    """A glob for the temporary files of ``path`` that process ``pid`` writes (or left)."""
    return f".{path.name}.{pid}.*{TEMP_SUFFIX}"


def _create_temp(path: Path, permissions: int) -> tuple[int, Path]:
    """A new temporary file next to ``path`` with exactly ``permissions``: its fd and path."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(_TEMP_ATTEMPTS):
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            fd = os.open(temp, flags, permissions)
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, permissions)  # the umask may have narrowed it
        except BaseException:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        return fd, temp
    raise FileExistsError(f"no free temporary name next to {path}")


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the file system supports it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _replacing(target: Path, permissions: int, durable: bool) -> Iterator[tuple[int, Path]]:
    """A new temporary file beside ``target`` (its descriptor and path) that replaces
    ``target`` when the block ends without an exception, and is removed when it does not."""
    fd, temp = _create_temp(target, permissions)
    try:
        yield fd, temp
        os.replace(temp, target)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        name_the_path(exc, target)
        raise
    if durable:
        fsync_folder(target.parent)


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str],
    mode: str = "wb",
    *,
    permissions: int = PRIVATE,
    durable: bool = True,
) -> Iterator[IO[Any]]:
    """A file object (``"wb"`` or ``"w"``, UTF-8) whose content replaces ``path`` when the
    block ends without an exception.

    ``durable=False`` skips the ``fsync`` calls: still atomic, but after a machine crash
    the file may be empty or short (for data checked on reading, such as cache entries).
    """
    if mode not in _WRITE_MODES:
        raise ValueError(f"atomic_open writes whole files: mode 'wb' or 'w', not {mode!r}")
    encoding = None if "b" in mode else "utf-8"
    with (
        _replacing(Path(path), permissions, durable) as (fd, _),
        os.fdopen(fd, mode, encoding=encoding) as handle,
    ):
        yield handle
        handle.flush()
        if durable:
            os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike[str], *, permissions: int = PRIVATE, durable: bool = True
) -> Iterator[Path]:
    """A temporary path (already created, empty) to write to by name; it replaces ``path``
    when the block ends without an exception, if something is there."""
    with _replacing(Path(path), permissions, durable) as (fd, temp):
        os.close(fd)
        yield temp
        if not temp.is_file():
            raise FileNotFoundError(f"nothing was written to the temporary file {temp}")
        if durable:
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())


def write_bytes(
    path: Path, data: bytes, mode: int = PRIVATE, *, durable: bool = True
) -> None:
    """Atomically write ``data`` to ``path`` with permissions ``mode``."""
    with atomic_open(path, "wb", permissions=mode, durable=durable) as handle:
        handle.write(data)


def write_json(path: Path, data: Any, mode: int = 0o644, *, durable: bool = True) -> None:
    """Atomically write ``data`` as indented JSON with permissions ``mode``."""
    with atomic_open(path, "w", permissions=mode, durable=durable) as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def name_the_path(exc: BaseException, path: Path) -> None:
    """Make an OSError that names no file (a full disk on ``write``) name ``path``."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
        exc.filename = str(path)


@contextlib.contextmanager
def staged_folder(folder: Path) -> Iterator[Path]:
    """A new, private staging folder beside ``folder`` that replaces it when the block
    ends without an exception, and is removed when it does not (a full disk leaves
    nothing behind, and the error names the folder)."""
    staging = folder.parent / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    try:
        yield staging
        replace_folder(staging, folder)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        name_the_path(exc, staging)
        raise


def replace_folder(staging: Path, folder: Path) -> None:
    """Put the finished folder ``staging`` in place of ``folder`` (the old one removed)."""
    old = folder.parent / f".{folder.name}.{os.getpid()}.old"
    if folder.exists():
        folder.rename(old)
    staging.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def _keep_strings(match: re.Match[str]) -> str:
    token = match.group(0)
    return token if token.startswith('"') else ""


def strip_jsonc(text: str) -> str:
    """JSON with comments and trailing commas (VS Code's format) as plain JSON; ``//``
    and ``/*`` inside strings are kept."""
    without_comments = _STRINGS_AND_COMMENTS.sub(_keep_strings, text)
    return _STRINGS_AND_TRAILING_COMMAS.sub(_keep_strings, without_comments)


def parse_jsonc(text: str) -> Any:
    """Parse JSON with comments and trailing commas; raises ValueError when it is not."""
    return json.loads(strip_jsonc(text))
