"""The control API (aiohttp): status, resume, keep-alive, activity, abort.

``GET /healthz`` is open; everything under ``/api/`` needs
``Authorization: Bearer <token>``, compared in constant time.
"""

from __future__ import annotations

import hmac
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from interactive.errors import ResumeConflict
from interactive.peers import PEER_HEADER
from interactive.ports import url_of
from interactive.state import SessionState

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_KEEPALIVE_SECONDS = 7 * 24 * 3600


class Controls(Protocol):
    """What the API can ask of the session."""

    state: SessionState

    def resume(self, peer: bool = False) -> dict[str, Any] | None:
        """What the resume will patch; ResumeConflict when it cannot resume."""

    def abort(self, peer: bool = False) -> None: ...

    def keepalive(self, seconds: float) -> float | None: ...  # the new reap_at

    def peer_status(self) -> dict[str, Any]: ...  # the other ranks of the pod, if any


def _authorized(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


def _auth_middleware(token: str, state: SessionState) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/api/"):
            if not _authorized(request, token):
                return web.json_response({"error": "missing or wrong bearer token"}, status=401)
            if request.method != "GET":
                # Reading the status is not activity: the companion extension polls it
                # from any open browser tab, and an untouched tab must not keep a GPU.
                state.touch()
        return await handler(request)

    return middleware


def _from_peer(request: web.Request) -> bool:
    """Forwarded by another rank of the pod: do not forward it again."""
    return request.headers.get(PEER_HEADER) == "1"


async def _json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(
            text='{"error": "body is not JSON"}', content_type="application/json"
        ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text='{"error": "body must be a JSON object"}', content_type="application/json"
        )
    return body


def build_app(controls: Controls, token: str) -> web.Application:
    state = controls.state

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def status(request: web.Request) -> web.Response:
        return web.json_response({**state.status(), **controls.peer_status()})

    async def resume(request: web.Request) -> web.Response:
        try:
            planned = controls.resume(peer=_from_peer(request))
        except ResumeConflict as exc:
            return web.json_response({"error": str(exc), "state": state.state}, status=409)
        return web.json_response({"state": "resuming", **(planned or {})}, status=202)

    async def keepalive(request: web.Request) -> web.Response:
        body = await _json_body(request)
        seconds = body.get("seconds", 3600)
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not 0 < seconds <= MAX_KEEPALIVE_SECONDS
        ):
            return web.json_response(
                {"error": f"seconds must be a number in (0, {MAX_KEEPALIVE_SECONDS}]"}, status=400
            )
        reap_at = controls.keepalive(float(seconds))
        return web.json_response({"reap_at": reap_at, "keepalive_until": state.keepalive_until})

    async def activity(request: web.Request) -> web.Response:
        body = await _json_body(request)
        log.debug("activity reported: %s", body.get("kind", "unknown"))
        return web.json_response({"ok": True})

    async def abort(request: web.Request) -> web.Response:
        controls.abort(peer=_from_peer(request))
        return web.json_response({"state": state.state}, status=202)

    app = web.Application(middlewares=[_auth_middleware(token, state)], client_max_size=64 * 1024)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/status", status)
    app.router.add_post("/api/resume", resume)
    app.router.add_post("/api/keepalive", keepalive)
    app.router.add_post("/api/activity", activity)
    app.router.add_post("/api/abort", abort)
    return app


class ControlServer:
    """Runs the API on an already-bound socket; ``url`` is where it answers."""

    def __init__(self, controls: Controls, token: str, sock: socket.socket) -> None:
        self._runner = web.AppRunner(
            build_app(controls, token), handle_signals=False, access_log=None
        )
        self._sock = sock
        self.url = url_of(sock)

    async def start(self) -> None:
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()

    async def stop(self) -> None:
        await self._runner.cleanup()
        self._sock.close()
