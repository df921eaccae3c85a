"""What a desktop editor asks of the control API (behind its bearer token).

- ``POST /api/ssh-key`` ``{"key": "ssh-ed25519 AAAA..."}``: the SSH endpoint accepts
  that public key from now on (``podcode ssh`` pushes the user's key as it connects);
- ``POST /api/files`` ``{"files": {"train.py": "<base64>"}}``: files edited on a laptop
  (``podcode resume --push``) written into the workspace before the resume.

Pushed files are bounded (:data:`MAX_PUSH_BYTES` for the whole body, read as it arrives,
:data:`MAX_FILES` files) and land only inside the workspace: a path that is absolute,
climbs out with ``..`` or leads out through a symbolic link is refused, and nothing is
written unless every path is good. Each file is written whole or not at all.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from aiohttp import web

from interactive.base.files import write_bytes

MAX_PUSH_BYTES = 16 << 20
"""The largest ``/api/files`` body (base64 and JSON included)."""
MAX_FILES = 256
MAX_KEY_BYTES = 16 << 10


class Refused(ValueError):
    """A pushed path or body that is not taken (the message says why)."""


def inside(workspace: Path, name: str) -> Path:
    """Where ``name`` (relative, ``/``-separated) goes in ``workspace``; :class:`Refused`
    when it would land outside it."""
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or ".." in pure.parts or "\0" in name:
        raise Refused(f"{name!r}: give a path relative to the workspace, without '..'")
    root = workspace.resolve()
    target = (root / pure).resolve()
    if target == root or root not in target.parents:
        raise Refused(f"{name!r} leads outside the workspace {root}")
    return target


def decode_files(body: Any, workspace: Path) -> dict[Path, bytes]:
    """The files of a push body, each checked; :class:`Refused` names the first bad one."""
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, dict) or not files:
        raise Refused('expected {"files": {"relative/path.py": "<base64>", ...}}')
    if len(files) > MAX_FILES:
        raise Refused(f"{len(files)} files: at most {MAX_FILES} at once")
    decoded = {}
    for name, data in files.items():
        if not isinstance(data, str):
            raise Refused(f"{name!r}: the content must be a base64 string")
        try:
            content = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise Refused(f"{name!r}: the content is not base64") from None
        decoded[inside(workspace, name)] = content
    return decoded


def write_files(files: dict[Path, bytes]) -> list[str]:
    """Write each file whole (a file's mode is kept; a new one is 0644); their paths."""
    for path, content in files.items():
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, content, mode)
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
        from interactive.session.ssh import KeyError_, parse_keys

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
            return web.json_response({"error": f"cannot write {exc.filename}: "
                                      f"{exc.strerror or exc}"}, status=500)
        return web.json_response({"written": written})

    app.router.add_post("/api/ssh-key", ssh_key)
    app.router.add_post("/api/files", files)
