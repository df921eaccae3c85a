"""Calls made on the engineer's behalf: a request that carries
:data:`~interactive.base.routes.ACTOR_HEADER` (``podcode mcp`` sends it on every call of a
coding agent) is an agent's.

- Where agents are not let in (``agents=False``, ``PODCODE_AGENTS=0``) every such call is
  answered 403 with a message that names the setting.
- An agent never logs in to the IDE: the login routes (whose page holds the IDE's
  password) answer it 403.
- Every call of an agent that changes something (any method but ``GET``: resume, abort,
  keep-alive, pushed files, an evaluation, a notebook cell) is recorded in the session's
  state (:meth:`interactive.base.state.SessionState.act`): who, what, when, and the
  status it was answered, shown by ``GET /api/status`` (``actions``), ``podcode status``,
  the IDE's status bar and the final email.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from interactive.base import routes
from interactive.base.state import SessionState

REFUSED = ("this session does not let coding agents in (agents=False, PODCODE_AGENTS=0): "
           "ask the engineer to open the session with agents=True, or to work in it "
           "themselves")
NO_LOGIN = "a coding agent does not log in to the IDE"
LABELS = {
    routes.RESUME: "resume", routes.ABORT: "abort", routes.KEEPALIVE: "keepalive",
    routes.FILES: "push files", routes.EVALUATE: "evaluate",
    routes.NOTEBOOK_EXECUTE: "notebook cell", routes.NOTEBOOK_INTERRUPT: "interrupt a cell",
    routes.NOTEBOOK_OPEN: "open the notebook", routes.SSH_KEY: "authorize an SSH key",
}
"""What each call that changes something is recorded as (others: their method and path)."""
UNRECORDED = frozenset({routes.ACTIVITY})
"""Not a change: the companion's report of activity."""
LOGIN_PATHS = frozenset({routes.LOGIN_LINK})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def actor_of(request: web.Request) -> str | None:
    """Who the call says it comes from (None: the engineer's own tools)."""
    actor = request.headers.get(routes.ACTOR_HEADER)
    return None if actor is None else (" ".join(actor.split()) or "agent")


def refusal(path: str, allowed: bool) -> str | None:
    """Why an agent's call to ``path`` is refused, or None."""
    if not allowed:
        return REFUSED
    if path in LOGIN_PATHS or path.startswith(routes.login("")):
        return NO_LOGIN
    return None


def refused_answer(request: web.Request, allowed: bool) -> web.Response | None:
    """403 for an agent's call that is refused (see :func:`refusal`), else None."""
    why = refusal(request.path, allowed) if actor_of(request) is not None else None
    return None if why is None else web.json_response({"error": why}, status=403)


async def describe(request: web.Request, response: web.StreamResponse | None,
                   workspace: Path | None = None) -> str:
    """What the call did, in a few words: an evaluation with its frame and code, pushed
    files by name (relative to ``workspace``)."""
    label = LABELS.get(request.path, f"{request.method} {request.path}")
    if request.path in (routes.EVALUATE, routes.NOTEBOOK_EXECUTE):
        return await _evaluated(request, label)
    if request.path == routes.FILES and isinstance(response, web.Response):
        written = [_relative(name, workspace) for name in _written(response)]
        if written:
            return f"{label}: {', '.join(written)}"
    return label


async def _evaluated(request: web.Request, label: str) -> str:
    """``evaluate in frame 1: x.shape`` (the handler read the body: it is kept)."""
    try:
        body = json.loads(await request.read()) if request.body_exists else {}
    except (ValueError, RecursionError):
        body = {}
    code = body.get("code") if isinstance(body, dict) else None
    if not isinstance(code, str):
        return label
    frame = body.get("frame", 0)
    where = f" in frame {frame}" if request.path == routes.EVALUATE else ""
    return f"{label}{where}: {code}"


def _relative(name: str, workspace: Path | None) -> str:
    if workspace is None:
        return name
    shown = os.path.relpath(name, workspace.resolve())
    return name if shown.startswith("..") else shown


def _written(response: web.Response) -> list[str]:
    try:
        body = json.loads(response.body) if isinstance(response.body, bytes) else {}
    except ValueError:
        return []
    names = body.get("written") if isinstance(body, dict) else None
    return [str(name) for name in names] if isinstance(names, list) else []


async def handle(request: web.Request, handler: Handler, state: SessionState,
                 allowed: bool, workspace: Path | None = None) -> web.StreamResponse:
    """Answer an agent's ``request`` (its token already checked): refused, or handled and
    (a change) recorded, whatever it was answered."""
    actor = actor_of(request)
    if actor is None:
        return await handler(request)
    refused = refused_answer(request, allowed)
    if refused is not None:
        return refused
    record = request.method != "GET" and request.path not in UNRECORDED
    try:
        response = await handler(request)
    except web.HTTPException as answered:
        if record:
            state.act(actor, await describe(request, None, workspace), answered.status)
        raise
    if record:
        state.act(actor, await describe(request, response, workspace), response.status)
    return response
