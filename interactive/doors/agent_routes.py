"""The control API's routes for a coding agent (``podcode mcp``), behind the session's
bearer token like every route; what each answers is in :mod:`interactive.base.routes`:

- ``GET /api/frames``: the failure and the failed call's frames (:mod:`.failure`);
- ``GET /api/frames/{index}/locals``: a frame's locals, summarised (:mod:`.summaries`);
- ``POST /api/evaluate``: code run in a frame as a notebook cell runs, on a kernel of its
  own (the engineer's notebook keeps its own cells and namespace), interrupted after
  its ``timeout``;
- ``GET /api/workspace/file`` and ``/api/workspace/search``: the workspace's text files
  (:mod:`.workspace_read`);
- ``GET /api/edits``: the edits since the session opened, as a unified diff.

Nothing here blocks the loop: what reads files, formats a traceback or calls a value's
``repr`` runs on a thread. No answer holds the session's token or the IDE's password:
each is removed from every answer (a cell may print a file that holds them).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from interactive.base import routes
from interactive.base.phases import RESUMABLE
from interactive.base.secrets import Secrets
from interactive.base.state import SessionState
from interactive.base.threads import in_thread
from interactive.base.types import ExcInfo
from interactive.doors import failure as failures
from interactive.doors import summaries, workspace_read
from interactive.doors.desktop import Refused
from interactive.doors.notebook.kernel import CellResult, FrameKernel, failed_frame

if TYPE_CHECKING:
    from interactive.storage.workspace import Snapshot

MAX_EVALUATE_SECONDS = 600.0
DEFAULT_EVALUATE_SECONDS = 30.0
BUSY_TOUCH_SECONDS = 30.0
"""While an evaluation runs, the session's activity is renewed this often."""
MAX_DIFF_CHARS = 256 * 1024
LOCALS_SECONDS = 30.0
"""The longest a frame's locals are summarised for (values' own methods run)."""


class AgentHost(Protocol):
    """What the agent's routes need of the session."""

    state: SessionState
    workspace: Path
    snapshot: Snapshot | None
    """The workspace as the session opened (None until it is taken)."""


class AgentDoor:
    """One session's door for agents: its host, the failure, the kernel of its
    evaluations, and the secrets no answer may hold."""

    def __init__(self, host: AgentHost, failure: Callable[[], ExcInfo | None],
                 secrets: Iterable[str | None] = (),
                 helpers: dict[str, Any] | None = None) -> None:
        self.host = host
        self.failure = failure
        self.secrets = Secrets(s for s in secrets if s)
        self.kernel = FrameKernel(failure, host.workspace, name="agent")
        if helpers is not None:  # the notebook's ``here`` helpers, shared
            self.kernel.helpers = helpers

    def answer(self, data: Any, status: int = 200) -> web.Response:
        """``data`` as strict JSON, every secret removed."""
        text = self.secrets.scrub(json.dumps(data, allow_nan=False, default=str))
        return web.Response(text=text, status=status, content_type="application/json")

    def error(self, message: str, status: int) -> web.Response:
        return self.answer({"error": message}, status)

    def waiting_failure(self) -> ExcInfo | None:
        """The failure shown, while the task waits in the session (else None)."""
        if self.host.state.state not in RESUMABLE:
            return None
        return self.failure()

    def not_waiting(self) -> web.Response:
        state = self.host.state.state
        if state in RESUMABLE:  # a session opened before the task ran (mode="startup")
            return self.error("the task has not failed: this session opened before it ran "
                              '(mode="startup"); resume runs it', 409)
        return self.error(f"the task is {state}: the failure can be read while it waits in "
                          "the session", 409)

    def close(self) -> None:
        self.kernel.close()


def _int(value: Any, name: str, default: int | None = None) -> int | None:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise Refused(f"{name} must be a whole number")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise Refused(f"{name} must be a whole number, not {str(value)[:40]!r}") from None


def _timeout(value: Any) -> float:
    if value is None:
        return DEFAULT_EVALUATE_SECONDS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) or not 0 < value <= MAX_EVALUATE_SECONDS:
        raise Refused(f"timeout must be a number of seconds in (0, {MAX_EVALUATE_SECONDS:g}]")
    return float(value)


def _check_frame(excinfo: ExcInfo, index: int) -> None:
    try:
        failures.frame_at(excinfo, index)
    except IndexError as exc:
        raise Refused(str(exc)) from None


async def _evaluated(door: AgentDoor, code: str, index: int, timeout: float) -> dict[str, Any]:
    """Run ``code`` in frame ``index``; its answer, interrupted after ``timeout`` seconds."""
    done = door.kernel.execute(code, frame=index)
    running = asyncio.wrap_future(done)
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout
    while not running.done() and loop.time() < until:
        await asyncio.wait({running}, timeout=min(BUSY_TOUCH_SECONDS, until - loop.time()))
        door.host.state.touch()  # an evaluation that runs is work: the session is not idle
    if running.done() and not running.cancelled():
        return running.result().as_dict()
    how = await in_thread(lambda: door.kernel.interrupt(only=done), "agent-interrupt")
    if done.done() and not done.cancelled():
        result = done.result()
    else:
        why = ("it had not started (an earlier evaluation still runs)" if how == "not run"
               else "it is blocked in native code and goes on until that call returns")
        result = CellResult([{"type": "error", "ename": "TimeoutError",
                              "evalue": f"stopped after {timeout:g} s: {why}",
                              "traceback": f"TimeoutError: stopped after {timeout:g} s: {why}"}],
                            ok=False)
    return {**result.as_dict(), "ok": False, "timed_out": True, "interrupt": how}


def add_routes(app: web.Application, door: AgentDoor,
               read_json: Callable[[web.Request], Any]) -> None:
    """The agent's routes; ``read_json`` reads a request's JSON object body."""
    host = door.host

    def refusing(handler: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
        @functools.wraps(handler)
        async def wrapped(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)  # type: ignore[no-any-return]
            except workspace_read.NotText as exc:
                return door.error(str(exc), 404)
            except Refused as exc:
                return door.error(str(exc), 400)
        return wrapped

    @refusing
    async def frames(request: web.Request) -> web.Response:
        excinfo = door.waiting_failure()
        if excinfo is None:
            return door.not_waiting()
        described = await asyncio.to_thread(
            lambda: failures.describe(excinfo, host.workspace,
                                      failed_frame(excinfo, host.workspace)))
        return door.answer(described)

    @refusing
    async def frame_locals(request: web.Request) -> web.Response:
        index = _int(request.match_info["index"], "the frame index")
        excinfo = door.waiting_failure()
        if excinfo is None:
            return door.not_waiting()
        assert index is not None
        _check_frame(excinfo, index)
        frame = failures.frame_at(excinfo, index)
        summarising = in_thread(lambda: summaries.summarise_locals(dict(frame.f_locals), index),
                                "agent-locals")
        try:  # a value's own __repr__ or __len__ may hang: left behind at the bound
            answer = await asyncio.wait_for(asyncio.shield(summarising), LOCALS_SECONDS)
        except asyncio.TimeoutError:
            return door.error(f"summarising the locals of frame {index} took over "
                              f"{LOCALS_SECONDS:g} s (a value's __repr__ or __len__ hangs?)",
                              504)
        return door.answer(answer)

    @refusing
    async def evaluate(request: web.Request) -> web.Response:
        body = await read_json(request)
        code = body.get("code")
        if not isinstance(code, str) or not code.strip():
            return door.error('expected {"code": "<Python source>", "frame": 0, '
                              '"timeout": 30}', 400)
        index = _int(body.get("frame"), "frame", 0)
        assert index is not None
        timeout = _timeout(body.get("timeout"))
        excinfo = door.waiting_failure()
        if excinfo is None:
            return door.not_waiting()
        _check_frame(excinfo, index)
        return door.answer(await _evaluated(door, code, index, timeout))

    @refusing
    async def read_file(request: web.Request) -> web.Response:
        query = request.query
        path = query.get("path")
        if not path:
            return door.error("expected ?path=<a file relative to the workspace>", 400)
        start = _int(query.get("start"), "start", 1)
        end = _int(query.get("end"), "end")
        assert start is not None
        return door.answer(await asyncio.to_thread(
            workspace_read.read_lines, host.workspace, path, start, end))

    @refusing
    async def search(request: web.Request) -> web.Response:
        pattern = request.query.get("pattern")
        if not pattern:
            return door.error("expected ?pattern=<a regular expression>", 400)
        workspace_read.compile_pattern(pattern)  # a bad one answered at once
        glob = request.query.get("glob") or None
        return door.answer(await asyncio.to_thread(
            workspace_read.search, host.workspace, pattern, glob))

    async def edits(request: web.Request) -> web.Response:
        snapshot = host.snapshot
        if snapshot is None:
            return door.error("the session is not open yet: no edits to show", 409)
        return door.answer(await asyncio.to_thread(_edits, snapshot))

    app.router.add_get(routes.FRAMES, frames)
    app.router.add_get(routes.LOCALS, frame_locals)
    app.router.add_post(routes.EVALUATE, evaluate)
    app.router.add_get(routes.WORKSPACE_FILE, read_file)
    app.router.add_get(routes.WORKSPACE_SEARCH, search)
    app.router.add_get(routes.EDITS, edits)


def _edits(snapshot: Snapshot) -> dict[str, Any]:
    changed = snapshot.changed()
    diff = snapshot.diff(changed)
    cut = len(diff) > MAX_DIFF_CHARS
    return {"files": changed, "diff": diff[:MAX_DIFF_CHARS], "truncated": cut,
            **({"note": f"the diff is cut at {MAX_DIFF_CHARS // 1024} KiB"} if cut else {})}
