"""What a desktop editor asks of the control API (behind its bearer token).

- ``POST /api/ssh-key`` ``{"key": "ssh-ed25519 AAAA..."}``: the SSH endpoint accepts
  that public key from now on (``podcode ssh`` pushes the user's key as it connects);
- ``POST /api/files`` ``{"files": {"train.py": "<base64>"}}``: files edited on a laptop
  (``podcode resume --push``) written into the workspace before the resume.

Pushed files are bounded (:data:`MAX_PUSH_BYTES` for the whole body, read as it arrives,
:data:`MAX_FILES` files, :data:`MAX_DEPTH` folders deep, :data:`MAX_NAME_BYTES` per name)
and land only inside the workspace: a path that is absolute, climbs out with ``..``, holds
NUL or text that is not UTF-8 (a lone surrogate), names a folder of the workspace or leads
out through a symbolic link is refused (400, naming the entry). A request is written whole
or not at all: every name is checked and every file staged beside its target first, then
they are moved into place; a move that fails midway puts back what the earlier ones replaced.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from aiohttp import web

from interactive.base import routes
from interactive.base.files import TEMP_SUFFIX, fsync_folder

MAX_PUSH_BYTES = 16 << 20
"""The largest ``/api/files`` body (base64 and JSON included)."""
MAX_FILES = 256
MAX_KEY_BYTES = 16 << 10
MAX_DEPTH = 32
"""Folders a pushed path may go down: a source tree is never deeper, and a path thousands
of levels deep would only reach the kernel's limits as an error."""
MAX_NAME_BYTES = 1024
"""The longest pushed path (UTF-8), well under the kernel's ``PATH_MAX`` once the
workspace is put before it; one component is at most :data:`MAX_PART_BYTES`."""
MAX_PART_BYTES = 255
"""``NAME_MAX`` of Linux file systems: the longest file or folder name."""
CLIENT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EISDIR, errno.ENOTDIR, errno.EILSEQ,
                           errno.EINVAL, errno.ELOOP})
"""Write errors that the pushed names caused (answered 400, not 500)."""


class Refused(ValueError):
    """A pushed path or body that is not taken (the message says why)."""


def check_name(name: str) -> PurePosixPath:
    """``name`` as a relative path, or :class:`Refused` saying what is wrong with it."""
    shown = ascii(name)
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise Refused(f"{shown}: not valid UTF-8 text (a lone surrogate)") from None
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or ".." in pure.parts or "\0" in name:
        raise Refused(f"{shown}: give a path relative to the workspace, without '..' or NUL")
    if len(pure.parts) > MAX_DEPTH:
        raise Refused(f"{shown[:80]}...: more than {MAX_DEPTH} folders deep")
    if size > MAX_NAME_BYTES:
        raise Refused(f"{shown[:80]}...: longer than {MAX_NAME_BYTES} bytes")
    if any(len(part.encode("utf-8")) > MAX_PART_BYTES for part in pure.parts):
        raise Refused(f"{shown[:80]}...: a name in it is over {MAX_PART_BYTES} bytes")
    return pure


def inside(workspace: Path, name: str) -> Path:
    """Where ``name`` (relative, ``/``-separated) goes in ``workspace``; :class:`Refused`
    when it would land outside it, or is no path for a file."""
    pure = check_name(name)
    root = workspace.resolve()
    try:
        target = (root / pure).resolve()
    except (OSError, RuntimeError) as exc:  # a symbolic link loop, a name too long
        raise Refused(f"{ascii(name)}: {getattr(exc, 'strerror', None) or exc}") from None
    if target == root or root not in target.parents:
        raise Refused(f"{ascii(name)} leads outside the workspace {root}")
    return target


def _check_place(name: str, target: Path, root: Path) -> None:
    """:class:`Refused` when a folder stands at ``target`` or a file where one of its
    folders should be."""
    if target.is_dir():
        raise Refused(f"{ascii(name)} is a folder in the workspace, not a file")
    for folder in target.parents:
        if folder == root:
            return
        if folder.exists() and not folder.is_dir():
            raise Refused(f"{ascii(name)}: {folder.relative_to(root)} is a file, not a folder")


def decode_files(body: Any, workspace: Path) -> dict[Path, bytes]:
    """The files of a push body, each checked; :class:`Refused` names the first bad one."""
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, dict) or not files:
        raise Refused('expected {"files": {"relative/path.py": "<base64>", ...}}')
    if len(files) > MAX_FILES:
        raise Refused(f"{len(files)} files: at most {MAX_FILES} at once")
    root = workspace.resolve()
    decoded: dict[Path, bytes] = {}
    for name, data in files.items():
        target = inside(workspace, name)
        if not isinstance(data, str):
            raise Refused(f"{ascii(name)}: the content must be a base64 string")
        try:
            content = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise Refused(f"{ascii(name)}: the content is not base64") from None
        _check_place(name, target, root)
        decoded[target] = content
    _no_file_over_a_folder(decoded, root)
    return decoded


def _no_file_over_a_folder(files: dict[Path, bytes], root: Path) -> None:
    """:class:`Refused` when one pushed file is a folder of another in the same push."""
    for target in files:
        clash = next((folder for folder in target.parents if folder in files), None)
        if clash is not None:
            raise Refused(f"{clash.relative_to(root)} is pushed as a file and as the folder "
                          f"of {target.relative_to(root)}")


@dataclass
class _Push:
    """One request's writing: staged files, the folders made for them, what was replaced
    (each target with its backup, None for a new file)."""

    staged: dict[Path, Path] = field(default_factory=dict)
    folders: list[Path] = field(default_factory=list)
    moved: list[tuple[Path, Path | None]] = field(default_factory=list)


def _make_folders(folder: Path, push: _Push) -> None:
    """Create ``folder`` and the missing folders above it, remembering them."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir()
        push.folders.append(made)


def _stage(target: Path, content: bytes, push: _Push) -> None:
    """``content`` in a new temporary file beside ``target``, with the mode it will have."""
    try:
        mode = target.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    _make_folders(target.parent, push)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    push.staged[target] = Path(temp)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())


def _backup(target: Path) -> Path | None:
    """A copy of ``target`` to put back (a hard link where the file system allows), or
    None when there is no file there."""
    if not target.exists():
        return None
    backup = target.with_name(f".{target.name}.{secrets.token_hex(4)}.old{TEMP_SUFFIX}")
    try:
        try:
            os.link(target, backup)
        except OSError:
            shutil.copy2(target, backup)
    except BaseException:
        backup.unlink(missing_ok=True)
        raise
    return backup


def _move_in(push: _Push) -> None:
    """Every staged file into place, the replaced ones backed up first."""
    for target, temp in push.staged.items():
        backup = _backup(target)
        try:
            os.replace(temp, target)
        except BaseException:
            if backup is not None:
                backup.unlink(missing_ok=True)
            raise
        push.moved.append((target, backup))


def _roll_back(push: _Push) -> None:
    """Put back what the moves replaced; remove the staged files and the new folders."""
    for target, backup in reversed(push.moved):
        with contextlib.suppress(OSError):
            if backup is None:
                target.unlink()
            else:
                os.replace(backup, target)
    for temp in push.staged.values():
        temp.unlink(missing_ok=True)
    for folder in reversed(push.folders):
        with contextlib.suppress(OSError):
            folder.rmdir()


def write_files(files: dict[Path, bytes]) -> list[str]:
    """Write every file or none (a file's mode is kept; a new one is 0644); their paths."""
    push = _Push()
    try:
        for target, content in files.items():
            _stage(target, content, push)
        _move_in(push)
    except BaseException:
        _roll_back(push)
        raise
    for _, backup in push.moved:
        if backup is not None:
            backup.unlink(missing_ok=True)
    for folder in {target.parent for target in files}:
        fsync_folder(folder)
    return [str(path) for path in files]


async def _bounded_json(request: web.Request, limit: int, timeout: float) -> Any:
    """The body as JSON, read as it arrives and refused once it passes ``limit`` bytes."""

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.content.iter_chunked(64 << 10):
            size += len(chunk)
            if size > limit:
                raise Refused(f"the body is over {limit >> 10} KiB: send less at once")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        raw = await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise Refused("the body did not arrive in time") from None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise Refused("the body is not JSON") from None


@dataclass
class Desktop:
    """What the routes need of the session: its workspace, and its SSH endpoint (None
    when it serves none)."""

    workspace: Path
    ssh: Callable[[], Any]


def add_routes(app: web.Application, desktop: Desktop, body_timeout: float) -> None:
    async def ssh_key(request: web.Request) -> web.Response:
        endpoint = desktop.ssh()
        if endpoint is None:
            return web.json_response({"error": "this session serves no SSH (ssh=False, or "
                                      "asyncssh is not installed in the task's image)"},
                                     status=409)
        from interactive.doors.ssh import KeyError_, parse_keys

        try:
            body = await _bounded_json(request, MAX_KEY_BYTES, body_timeout)
            key = body.get("key") if isinstance(body, dict) else None
            if not isinstance(key, str):
                raise Refused('expected {"key": "ssh-ed25519 AAAA..."}')
            keys = parse_keys(key, "the key sent")
            if len(keys) != 1:
                raise Refused("send exactly one public key")
            fingerprint = endpoint.authorize(keys[0])
        except (Refused, KeyError_) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"fingerprint": fingerprint, "port": endpoint.port,
                                  "host_key": endpoint.host_public_key})

    async def files(request: web.Request) -> web.Response:
        try:
            body = await _bounded_json(request, MAX_PUSH_BYTES, body_timeout)
            decoded = decode_files(body, desktop.workspace)
            written = await asyncio.to_thread(write_files, decoded)
        except Refused as exc:
            return web.json_response({"error": str(exc)}, status=400)
        except OSError as exc:
            return web.json_response(
                {"error": f"nothing was written: cannot write {exc.filename}: "
                          f"{exc.strerror or exc}"},
                status=400 if exc.errno in CLIENT_ERRNOS else 500)
        return web.json_response({"written": written})

    app.router.add_post(routes.SSH_KEY, ssh_key)
    app.router.add_post(routes.FILES, files)
