"""The coding agent's test set-up: a stand-in session that speaks the control API's agent
routes as ``interactive/base/routes.py`` documents them (a real aiohttp server on
loopback, a real workspace folder, cells run with ``exec`` in a namespace), its record in
``PODCODE_HOME``; and the MCP SDK's own client driving a real ``podcode mcp`` process over
stdio, every byte that process writes kept for the test to read."""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import difflib
import io
import json
import os
import re
import secrets
import socket
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from interactive.base import routes

ROOT = Path(__file__).resolve().parent.parent
PAGE_LINES = 40
"""Lines per page of the stand-in's ``GET /api/workspace/file`` (small: paging is used)."""


@dataclass
class Png:
    """A value the stand-in shows as a figure (``image/png``)."""

    data: bytes = b"\x89PNG\r\n\x1a\n-a-figure-"


@dataclass
class FakeSession:
    """What the stand-in session holds and does; ``calls``: (method, path, actor)."""

    home: Path
    workspace: Path
    namespace: dict[str, Any]
    on_resume: Callable[[Path], tuple[str, str | None]]
    """Run on resume with the workspace: ``("done", None)`` or ``("waiting", new error)``."""
    error: str = "KeyError: 'prise'"
    failed_frame: int = 1
    locals: list[dict[str, Any]] = field(default_factory=list)
    token: str = field(default_factory=lambda: "tok-" + secrets.token_hex(16))
    password: str = field(default_factory=lambda: "pw-" + secrets.token_hex(12))
    state: str = "waiting"
    attempt: int = 0
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)
    original: dict[str, str] = field(default_factory=dict)
    pending: tuple[str, str | None] | None = None
    port: int = 0

    def snapshot(self) -> None:
        self.original = {p.relative_to(self.workspace).as_posix(): p.read_text()
                         for p in sorted(self.workspace.rglob("*")) if p.is_file()}

    def status(self) -> dict[str, Any]:
        if self.pending is not None:  # one "running" answer, then the outcome
            self.state, error = self.pending
            self.pending = None
            if self.state == "waiting":
                self.attempt += 1
                self.error = error or self.error
            return {**self._status(), "state": "running"}
        return self._status()

    def _status(self) -> dict[str, Any]:
        return {"state": self.state, "task": "job.py:total", "error": self.error,
                "attempt": self.attempt, "idle_seconds": 3.0, "reap_at": None,
                "cleanup_at": 1e12, "owner": "ana@example.com", "notes": []}

    def frames(self) -> dict[str, Any]:
        text = (f"Traceback (most recent call last):\n  File \"job.py\", line 5, in total\n"
                f"    return df[\"prise\"].sum()\n{self.error}\n")
        return {"exception": {"type": self.error.split(":")[0], "module": "builtins",
                              "message": self.error.split(": ", 1)[-1], "traceback": text},
                "frames": [{"index": 0, "function": "get_loc", "file": "pandas/core/base.py",
                            "line": 3812, "in_workspace": False, "source": "->3812 raise"},
                           {"index": 1, "function": "total", "file": "job.py", "line": 5,
                            "in_workspace": True, "source": '->    5 return df["prise"].sum()'}],
                "failed_frame": self.failed_frame, "frames_left_out": 0}

    def run_cell(self, code: str) -> dict[str, Any]:
        out = io.StringIO()
        outputs: list[dict[str, Any]] = []
        try:
            module = ast.parse(code)
            last = module.body[-1] if module.body and isinstance(module.body[-1], ast.Expr) \
                else None
            if last is not None:
                module.body.pop()
            with contextlib.redirect_stdout(out):
                exec(compile(module, "<cell>", "exec"), self.namespace)  # noqa: S102
                value = eval(compile(ast.Expression(last.value), "<cell>", "eval"),  # noqa: S307
                             self.namespace) if last is not None else None
        except Exception as exc:
            if out.getvalue():
                outputs.append({"type": "stream", "name": "stdout", "text": out.getvalue()})
            outputs.append({"type": "error", "ename": type(exc).__name__, "evalue": str(exc),
                            "traceback": "".join(traceback.format_exception(exc))})
            return {"outputs": outputs, "ok": False, "execution_count": 1}
        if out.getvalue():
            outputs.append({"type": "stream", "name": "stdout", "text": out.getvalue()})
        if isinstance(value, Png):
            outputs.append({"type": "display", "data": {
                "image/png": base64.b64encode(value.data).decode(), "text/plain": "<Figure>"}})
        elif value is not None:
            outputs.append({"type": "display", "data": {"text/plain": repr(value)}})
        return {"outputs": outputs, "ok": True, "execution_count": 1}

    def write_record(self) -> None:
        record = {"state": self.state, "task": "job.py:total", "error": self.error,
                  "workspace": str(self.workspace), "pid": os.getpid(),
                  "control_url": f"http://127.0.0.1:{self.port}", "token": self.token,
                  "code_server_url": "http://127.0.0.1:1", "password": self.password,
                  "session": "4242-1"}
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / "session.json"
        path.write_text(json.dumps(record))
        path.chmod(0o600)


def build_app(fake: FakeSession) -> web.Application:
    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith(routes.API):
            fake.calls.append((request.method, request.path,
                               request.headers.get(routes.ACTOR_HEADER)))
            if request.headers.get("Authorization") != f"Bearer {fake.token}":
                return web.json_response({"error": "unauthorized"}, status=401)
        return await handler(request)

    def answer(data: Any, status: int = 200) -> web.Response:
        return web.json_response(data, status=status)

    async def healthz(request: web.Request) -> web.Response:
        return answer({"ok": True})

    async def status(request: web.Request) -> web.Response:
        return answer(fake.status())

    async def frames(request: web.Request) -> web.Response:
        return answer(fake.frames())

    async def frame_locals(request: web.Request) -> web.Response:
        index = int(request.match_info["index"])
        if index > 1:
            return answer({"error": f"no frame {index}: the failure has 2 frames"}, 400)
        return answer({"frame": index, "locals": fake.locals, "left_out": 0})

    async def evaluate(request: web.Request) -> web.Response:
        body = await request.json()
        if fake.state != "waiting":
            return answer({"error": f"the task is {fake.state}"}, 409)
        return answer(await asyncio.to_thread(fake.run_cell, body["code"]))

    async def read_file(request: web.Request) -> web.Response:
        rel = request.query["path"]
        path = fake.workspace / rel
        if not path.is_file():
            return answer({"error": f"no file {rel} in the workspace"}, 404)
        lines = path.read_text().splitlines()
        start = int(request.query.get("start", "1"))
        end = min(int(request.query.get("end", str(start + PAGE_LINES - 1))),
                  start + PAGE_LINES - 1, len(lines))
        text = "".join(f"{n:6d}\t{lines[n - 1]}\n" for n in range(start, end + 1))
        return answer({"path": rel, "start": start, "end": end, "total_lines": len(lines),
                       "text": text, "truncated": False})

    async def search(request: web.Request) -> web.Response:
        pattern = re.compile(request.query["pattern"])
        matches = [{"path": p.relative_to(fake.workspace).as_posix(), "line": n, "text": t}
                   for p in sorted(fake.workspace.rglob("*.py"))
                   for n, t in enumerate(p.read_text().splitlines(), 1) if pattern.search(t)]
        return answer({"matches": matches, "truncated": False})

    async def files(request: web.Request) -> web.Response:
        body = await request.json()
        for rel, data in body["files"].items():
            (fake.workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (fake.workspace / rel).write_bytes(base64.b64decode(data))
        return answer({"written": sorted(body["files"])})

    async def edits(request: web.Request) -> web.Response:
        diff, changed = [], []
        for path in sorted(fake.workspace.rglob("*")):
            rel = path.relative_to(fake.workspace).as_posix()
            now, before = path.read_text(), fake.original.get(rel, "")
            if now != before:
                changed.append(rel)
                diff += difflib.unified_diff(before.splitlines(True), now.splitlines(True),
                                             f"a/{rel}", f"b/{rel}")
        return answer({"diff": "".join(diff), "files": changed})

    async def resume(request: web.Request) -> web.Response:
        if fake.state != "waiting":
            return answer({"error": f"the task is {fake.state}; nothing to resume"}, 409)
        fake.pending = await asyncio.to_thread(fake.on_resume, fake.workspace)
        fake.state = "resuming"
        return answer({"patched": ["job.py:total"]}, 202)

    async def abort(request: web.Request) -> web.Response:
        fake.state = "failed"
        return answer({"result": "aborted"})

    async def keepalive(request: web.Request) -> web.Response:
        body = await request.json()
        return answer({"reap_at": None, "keepalive_seconds": body["seconds"]})

    app = web.Application(middlewares=[auth])
    app.router.add_get(routes.HEALTHZ, healthz)
    app.router.add_get(routes.STATUS, status)
    app.router.add_get(routes.FRAMES, frames)
    app.router.add_get(routes.LOCALS, frame_locals)
    app.router.add_post(routes.EVALUATE, evaluate)
    app.router.add_get(routes.WORKSPACE_FILE, read_file)
    app.router.add_get(routes.WORKSPACE_SEARCH, search)
    app.router.add_post(routes.FILES, files)
    app.router.add_get(routes.EDITS, edits)
    app.router.add_post(routes.RESUME, resume)
    app.router.add_post(routes.ABORT, abort)
    app.router.add_post(routes.KEEPALIVE, keepalive)
    return app


@contextlib.contextmanager
def served(fake: FakeSession) -> Iterator[FakeSession]:
    """The stand-in's control API on loopback (its own loop thread) and its record."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = web.AppRunner(build_app(fake), handle_signals=False)
    sock = socket.create_server(("127.0.0.1", 0))
    fake.port = sock.getsockname()[1]

    async def start() -> None:
        await runner.setup()
        await web.SockSite(runner, sock).start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    fake.snapshot()
    fake.write_record()
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


JOB = '''\
import pandas as pd


def total(df):
    return df["prise"].sum() * df["qty"].sum()
'''
"""The stand-in's task: a typo'd column."""


def run_job(workspace: Path, df: Any) -> Any:
    """What the task returns with the workspace's code (raises as it does)."""
    scope: dict[str, Any] = {}
    exec(compile((workspace / "job.py").read_text(), "job.py", "exec"), scope)  # noqa: S102
    return scope["total"](df)


@contextlib.contextmanager
def stand_in(tmp_path: Path, podcode_home: Path) -> Iterator[FakeSession]:
    """A served stand-in session whose task (:data:`JOB`) sums a typo'd column; each
    resume runs the workspace's ``total`` on the same DataFrame (its results are kept in
    the namespace's ``results``)."""
    import pandas as pd

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "job.py").write_text(JOB)
    df = pd.DataFrame({"price": [1.5, 2.0, 4.0], "qty": [1, 2, 3]})
    results: list[Any] = []

    def on_resume(ws: Path) -> tuple[str, str | None]:
        try:
            results.append(run_job(ws, df))
        except Exception as exc:
            return "waiting", f"{type(exc).__name__}: {exc}"
        return "done", None

    fake = FakeSession(podcode_home, workspace, {"df": df, "Png": Png}, on_resume)
    fake.locals = [{"name": "df", "type": "DataFrame",
                    "summary": "DataFrame shape=(3, 2) columns=['price', 'qty']"}]
    fake.namespace["results"] = results
    with served(fake):
        yield fake


@dataclass
class Agent:
    """The MCP client session, and where the server's stdout and stderr are kept."""

    session: ClientSession
    stdout: Path
    stderr: Path

    async def call(self, tool: str, **arguments: Any) -> Any:
        return await self.session.call_tool(tool, arguments)

    def received(self) -> bytes:
        """Every byte the server wrote (to the client, and its log)."""
        return self.stdout.read_bytes() + self.stderr.read_bytes()


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


@contextlib.asynccontextmanager
async def mcp_agent(tmp_path: Path, *options: str,
                    env: dict[str, str] | None = None) -> AsyncIterator[Agent]:
    """``podcode mcp OPTIONS`` in a child process, driven by the SDK's stdio client; its
    stdout passes through ``tee`` into a file."""
    stdout, stderr = tmp_path / "mcp-stdout.bin", tmp_path / "mcp-stderr.txt"
    script = 'exec "$0" -m interactive.cli mcp "$@" | tee "$PODCODE_TEST_TEE"'
    environ = {"PODCODE_HOME": os.environ["PODCODE_HOME"], "PYTHONPATH": str(ROOT),
               "PODCODE_TEST_TEE": str(stdout), **(env or {})}
    params = StdioServerParameters(command="/bin/sh", args=["-c", script, sys.executable,
                                                            *options],
                                   env=environ, cwd=str(ROOT))
    with open(stderr, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield Agent(session, stdout, stderr)
