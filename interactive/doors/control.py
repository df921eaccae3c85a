"""The control API (aiohttp): status, resume, keep-alive, activity, abort, the
notebook in the failed frame (:mod:`interactive.doors.notebook.routes`) and a coding
agent's routes (:mod:`interactive.doors.agent_routes`; an agent's calls are refused or
recorded by :mod:`interactive.doors.actors`).

``GET /healthz`` is open; everything under ``/api/`` needs
``Authorization: Bearer <token>``, compared in constant time.

Bounded and quiet: a connection must deliver each request head within
``head_timeout`` (of connecting, or of its previous request), and a body
within ``body_timeout``, or it is closed (a client that sends half a request
cannot hold a connection). aiohttp's own error logging goes through
:class:`OneLineFilter`: a malformed request is one line that names its kind,
never its bytes (which may carry the token), and no traceback.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
import math
import socket
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from interactive.base import routes
from interactive.base.errors import ResumeConflict
from interactive.base.phases import Phase
from interactive.base.ports import url_of
from interactive.base.state import SessionState
from interactive.base.threads import in_thread
from interactive.base.types import ExcInfo
from interactive.distributed.peers import PEER_HEADER
from interactive.doors import actors, agent_routes, desktop, login
from interactive.doors.notebook import routes as notebook_routes

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_KEEPALIVE_SECONDS = 7 * 24 * 3600
HEAD_TIMEOUT_SECONDS = 10.0
"""Time a connection gets to send a complete request head (after connecting or after its
previous request); then it is closed."""
BODY_TIMEOUT_SECONDS = 10.0
"""Time a request gets to send its body once its head arrived; then 408 and closed."""
MAX_WAIT_SECONDS = 60.0
"""The longest ``GET /api/status?wait=`` holds its answer for a change: the companion asks
again at once, so a waiting IDE costs one request a minute instead of one every few
seconds, and still hears of a change at once."""
LINGER_SECONDS = 2.0
"""How long an unread body is drained after the response before the connection closes."""
STOP_SECONDS = 0.25
"""At stop, how long requests still being answered get to finish before they are
cancelled (a notebook cell's request is answered at once: the stop never waits for a
cell). Nothing the session needs is lost: the session is ending."""


class Controls(Protocol):
    """What the API can ask of the session."""

    state: SessionState

    def resume(self, peer: bool = False) -> dict[str, Any] | None:
        """What the resume will patch; ResumeConflict when it cannot resume. Called on a
        thread of its own: it may take seconds (the API answers other requests meanwhile)."""

    def abort(self, peer: bool = False) -> None: ...

    def keepalive(self, seconds: float) -> float | None: ...  # the new reap_at

    def peer_status(self) -> dict[str, Any]: ...  # the other ranks of the pod, if any


_answer = functools.partial(web.json_response, dumps=functools.partial(json.dumps, allow_nan=False))
"""Every answer is strict JSON: no ``Infinity`` or ``NaN``, which JSON parsers refuse."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _authorized(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    # Undecodable bytes arrive as surrogates: compare them as the bytes they were.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"), token.encode()
    )


def _auth_middleware(token: str, state: SessionState, agents: bool = True,
                     workspace: Path | None = None) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        guard = request.protocol if isinstance(request.protocol, GuardedHandler) else None
        if guard is not None:
            guard.request_started()
        try:
            if request.path.startswith(routes.API):
                if not _authorized(request, token):
                    return _answer(
                        {"error": "missing or wrong bearer token"}, status=401
                    )
                refused = actors.refused_answer(request, agents)
                if refused is not None:  # an agent where none is let in: not activity
                    return refused
                if request.method != "GET":
                    # Reading the status is not activity: the companion extension polls it
                    # from any open browser tab, and an untouched tab must not keep a GPU.
                    state.touch()
            # An agent's call (it says so): refused where agents are not let in, else
            # recorded when it changes something.
            return await actors.handle(request, handler, state, agents, workspace)
        finally:
            if guard is not None:
                guard.request_finished()

    return middleware


def _from_peer(request: web.Request) -> bool:
    """Forwarded by another rank of the pod: do not forward it again."""
    return request.headers.get(PEER_HEADER) == "1"


async def _json_body(request: web.Request, timeout: float) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        raw = await asyncio.wait_for(request.read(), timeout)
    except asyncio.TimeoutError:
        raise web.HTTPRequestTimeout(
            text='{"error": "the body did not arrive in time"}',
            content_type="application/json", headers={"Connection": "close"},
        ) from None
    try:
        body = json.loads(raw, parse_constant=_no_constants)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to be a request
        raise web.HTTPBadRequest(
            text='{"error": "body is not JSON (or nested too deeply)"}',
            content_type="application/json",
        ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text='{"error": "body must be a JSON object"}', content_type="application/json"
        )
    return body


def _long_poll(request: web.Request) -> tuple[int | None, float]:
    """``?version=N&wait=S``: the version the client saw and how long it may wait for
    the next (at most :data:`MAX_WAIT_SECONDS`); ``(None, 0)`` without them."""
    try:
        seen = int(request.query["version"])
        wait = float(request.query.get("wait", "0"))
    except (KeyError, ValueError):
        return None, 0.0
    if not math.isfinite(wait):
        return None, 0.0
    return seen, min(max(wait, 0.0), MAX_WAIT_SECONDS)


async def _next_change(state: SessionState, wait: float) -> None:
    """Until the status changes (the session closing changes it) or ``wait`` seconds."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def wake() -> None:
        loop.call_soon_threadsafe(changed.set)

    stop = state.watch(wake)
    try:
        await asyncio.wait_for(changed.wait(), wait)
    except asyncio.TimeoutError:
        pass
    finally:
        stop()


def build_app(
    controls: Controls, token: str, body_timeout: float = BODY_TIMEOUT_SECONDS,
    password: str | None = None, editors: desktop.Desktop | None = None,
    notebook: notebook_routes.Notebook | None = None,
    agent: agent_routes.AgentDoor | None = None, agents: bool = True,
) -> web.Application:
    """The API; ``password`` (code-server's) enables one-time login links
    (:mod:`interactive.doors.login`), ``editors`` the SSH key and file pushes of
    desktop editors (:mod:`interactive.doors.desktop`), ``notebook`` the cells run in
    the failed frame, ``agent`` the coding agent's routes (by default, with a notebook,
    on its session and failure); ``agents=False`` refuses every agent's call."""
    state = controls.state
    if agent is None and notebook is not None:
        agent = agent_routes.AgentDoor(notebook.host, notebook.failure, (token, password),
                                       helpers=notebook.kernel.helpers)

    async def healthz(request: web.Request) -> web.Response:
        return _answer({"ok": True})

    async def status(request: web.Request) -> web.Response:
        seen, wait = _long_poll(request)
        if seen is not None and seen == state.version and wait > 0:
            await _next_change(state, wait)
        return _answer({**state.status(), **controls.peer_status()})

    async def resume(request: web.Request) -> web.Response:
        peer = _from_peer(request)
        try:  # planning reads the workspace and may scan the heap: on a thread of its own
            planned = await in_thread(lambda: controls.resume(peer=peer), "resume-plan")
        except ResumeConflict as exc:
            return _answer({"error": str(exc), "state": state.state.value}, status=409)
        return _answer({"state": Phase.RESUMING.value, **(planned or {})}, status=202)

    async def keepalive(request: web.Request) -> web.Response:
        body = await _json_body(request, body_timeout)
        seconds = body.get("seconds", 3600)
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not 0 < seconds <= MAX_KEEPALIVE_SECONDS
        ):
            return _answer(
                {"error": f"seconds must be a number in (0, {MAX_KEEPALIVE_SECONDS}]"}, status=400
            )
        reap_at = controls.keepalive(float(seconds))
        return _answer({  # what was asked with the limits behind reap_at: the CLI explains it
            "reap_at": reap_at, "keepalive_until": state.keepalive_until,
            "seconds": float(seconds), "max_idle_seconds": state.max_idle_seconds,
            "grace_seconds": state.grace_seconds,
        })

    async def activity(request: web.Request) -> web.Response:
        body = await _json_body(request, body_timeout)
        log.debug("activity reported: %s", body.get("kind", "unknown"))
        return _answer({"ok": True})

    async def abort(request: web.Request) -> web.Response:
        peer = _from_peer(request)  # a job over several pods is told through its store
        await in_thread(lambda: controls.abort(peer=peer), "abort")  # so: off the loop
        return _answer({"state": state.state.value}, status=202)

    workspace = editors.workspace if editors is not None else None
    app = web.Application(middlewares=[_auth_middleware(token, state, agents, workspace)],
                          client_max_size=64 * 1024)
    app.router.add_get(routes.HEALTHZ, healthz)
    app.router.add_get(routes.STATUS, status)
    app.router.add_post(routes.RESUME, resume)
    app.router.add_post(routes.KEEPALIVE, keepalive)
    app.router.add_post(routes.ACTIVITY, activity)
    app.router.add_post(routes.ABORT, abort)
    login.add_routes(app, login.LoginLinks(), password)
    if editors is not None:
        desktop.add_routes(app, editors, body_timeout)
    if notebook is not None:
        notebook_routes.add_routes(app, notebook, lambda r: _json_body(r, body_timeout))
    if agent is not None:
        agent_routes.add_routes(app, agent, lambda r: _json_body(r, body_timeout))
    return app


class OneLineFilter(logging.Filter):
    """Rewrites aiohttp's server log records: one line, nothing the client sent.

    A malformed request (aiohttp's ``HttpProcessingError``: bad request line,
    header or length) becomes "malformed request from PEER answered 400
    (BadHttpMessage)". Any other exception keeps its traceback's frames but
    loses its message, which may quote a header.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        if isinstance(exc, HttpProcessingError):
            record.msg = "control API: malformed request from %s answered %d (%s)"
            record.args = (peer, exc.code or 400, type(exc).__name__)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        elif exc is not None:
            record.msg = "control API: %s while handling a request from %s"
            record.args = (type(exc).__name__, peer)
            frames = "".join(traceback.format_tb(exc.__traceback__))
            record.exc_info, record.exc_text = None, f"Traceback:\n{frames}{type(exc).__name__}"
        record.msg = " ".join(str(record.msg).split()) if exc is None else record.msg
        return True


http_log = logging.getLogger(f"{__name__}.http")
"""The logger aiohttp's request handlers write to (filtered by :class:`OneLineFilter`)."""
http_log.addFilter(OneLineFilter())


class GuardedHandler(web.RequestHandler):
    """aiohttp's connection handler with a deadline for each request head.

    The deadline runs from the connection's start and again from the end of each
    request; the request's arrival at the application stops it. When it passes,
    the connection is closed: a client sending half a request (slowloris) or an
    idle connection is cut off.
    """

    def __init__(self, manager: web.Server, *, head_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def request_started(self) -> None:
        self._disarm()

    def request_finished(self) -> None:
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = asyncio.get_running_loop().call_later(self.head_timeout, self._expire)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        log.debug("control API: no complete request within %gs; closing the connection",
                  self.head_timeout)
        self.force_close()


class ControlServer:
    """Runs the API on an already-bound socket; ``url`` is where it answers."""

    def __init__(
        self,
        controls: Controls,
        token: str,
        sock: socket.socket,
        *,
        head_timeout: float = HEAD_TIMEOUT_SECONDS,
        body_timeout: float = BODY_TIMEOUT_SECONDS,
        password: str | None = None,
        editors: desktop.Desktop | None = None,
        failure: Callable[[], ExcInfo | None] | None = None,
        agents: bool = True,
        secrets: tuple[str | None, ...] = (),
    ) -> None:
        """``failure``: the exception the session shows (the notebook's cells and an
        agent's evaluations run in its frames); needs ``controls`` to be a
        :class:`notebook_routes.Host`. ``agents``: let coding agents in. ``secrets``: more
        values no agent's answer may hold (besides the token and ``password``: JupyterLab's
        token, say)."""
        self.notebook = None if failure is None else notebook_routes.Notebook(
            controls, failure)  # type: ignore[arg-type]
        self.agent = None if self.notebook is None else agent_routes.AgentDoor(
            self.notebook.host, self.notebook.failure, (token, password, *secrets),
            helpers=self.notebook.kernel.helpers)
        self._runner = web.AppRunner(
            build_app(controls, token, body_timeout, password, editors, self.notebook,
                      self.agent, agents),
            handle_signals=False, access_log=None, shutdown_timeout=STOP_SECONDS,
        )
        self._sock = sock
        self._head_timeout = head_timeout
        self._listener: asyncio.AbstractServer | None = None
        self.url = url_of(sock)

    async def start(self) -> None:
        await self._runner.setup()
        manager = self._runner.server
        if manager is None:  # setup() makes it; never None after it
            raise RuntimeError("the control API's server was not set up")
        loop = asyncio.get_running_loop()

        def connection() -> GuardedHandler:
            return GuardedHandler(
                manager, loop=loop, head_timeout=self._head_timeout, access_log=None,
                logger=http_log, lingering_time=LINGER_SECONDS,
            )

        self._listener = await loop.create_server(connection, sock=self._sock)

    async def stop(self) -> None:
        """Stop serving within about :data:`STOP_SECONDS`: a running notebook cell is
        answered as left running (its thread goes on alone), other requests in flight are
        given that long, then cancelled."""
        if self.notebook is not None:
            self.notebook.close()
        if self.agent is not None:
            self.agent.close()
        if self._listener is not None:
            self._listener.close()
        await self._runner.cleanup()
        self._sock.close()
