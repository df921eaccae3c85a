"""The CLI's test set-up: a live session (a real control API and a stand-in code-server on
loopback, with the session.json the core writes) and a console whose output is kept."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from aiohttp import web

from interactive.base.errors import ResumeConflict
from interactive.base.ports import listen_socket
from interactive.base.state import SessionState
from interactive.cli import Console, run
from interactive.doors.control import ControlServer

if TYPE_CHECKING:
    from tests.fake_kube import FakeKube

NOW = 1_800_000_000.0


class Controls:
    """What the session does when the API is called; records every call."""

    def __init__(self, state: str) -> None:
        self.state = SessionState(task="train.fit", state=state, error="ValueError: nan",
                                  clock=lambda: NOW, max_idle_seconds=1800.0, grace_seconds=600.0)
        self.calls: list[Any] = []

    def resume(self, peer: bool = False) -> None:
        if self.state.state != "waiting":
            raise ResumeConflict(f"the task is {self.state.state}; nothing to resume")
        self.calls.append("resume")
        self.state.set(state="resuming")

    def abort(self, peer: bool = False) -> None:
        self.calls.append("abort")

    def peer_status(self) -> dict[str, Any]:
        return {}

    def keepalive(self, seconds: float) -> float | None:
        from interactive.base.settings import IdleSettings
        from interactive.reaper.monitor import keepalive

        self.calls.append(("keepalive", seconds))
        return keepalive(self.state, IdleSettings(), seconds, now=NOW)


class LiveSession:
    """A real control API and a stand-in code-server on loopback, and their session.json;
    ``login``: the API hands out one-time login links."""

    def __init__(self, home: Path, *, state: str = "waiting", ide: bool = True,
                 login: bool = False) -> None:
        self.home = home
        self.controls = Controls(state)
        self.token, self.password = "tok-secret-1", "pw-secret-2"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        sock = socket.create_server(("127.0.0.1", 0))
        self.control = ControlServer(self.controls, self.token, sock,  # type: ignore[arg-type]
                                     password=self.password if login else None)
        self._call(self.control.start())
        self.control_port = sock.getsockname()[1]
        self._ide_runner: web.AppRunner | None = None
        self.ide_port: int | None = self._call(self._start_ide()) if ide else None
        self.debug_port = 5678
        self.write_record(ide=ide)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _start_ide(self) -> int:
        app = web.Application()
        async def index(request: web.Request) -> web.Response:
            return web.Response(text="stand-in code-server")

        app.router.add_get("/", index)
        self._ide_runner = web.AppRunner(app, handle_signals=False)
        await self._ide_runner.setup()
        site = web.TCPSite(self._ide_runner, "127.0.0.1", 0)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    def write_record(self, ide: bool = True, **overrides: Any) -> None:
        record = {
            "state": self.controls.state.state, "task": "train.fit", "error": "ValueError: nan",
            "workspace": "/workspace/src", "control_url": f"http://0.0.0.0:{self.control_port}",
            "token": self.token, "debug": {"host": "127.0.0.1", "port": self.debug_port},
            "code_server_url": f"http://127.0.0.1:{self.ide_port}" if ide else None,
            "password": self.password if ide else None, "pid": os.getpid(), **overrides,
        }
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / "session.json"
        path.write_text(json.dumps(record))
        path.chmod(0o600)

    @property
    def ports(self) -> dict[str, int]:
        return {"code_server": self.ide_port or 8080, "control": self.control_port,
                "debug": self.debug_port}

    def close(self) -> None:
        self._call(self.control.stop())
        if self._ide_runner is not None:
            self._call(self._ide_runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def live(podcode_home: Path) -> Iterator[LiveSession]:
    session = LiveSession(podcode_home)
    yield session
    session.close()


@pytest.fixture
def console() -> Console:
    return Console(out=io.StringIO(), err=io.StringIO(), environ=os.environ, clock=lambda: NOW)


def output(console: Console) -> str:
    return console.out.getvalue()  # type: ignore[attr-defined,no-any-return]


def errors(console: Console) -> str:
    return console.err.getvalue()  # type: ignore[attr-defined,no-any-return]


def cli(*argv: str) -> tuple[int, str, str]:
    """``podcode ARGV`` in this process: its exit code, output and errors."""
    console = Console(out=io.StringIO(), err=io.StringIO(), environ=os.environ)
    code = run(list(argv), console)
    return code, console.out.getvalue(), console.err.getvalue()  # type: ignore[attr-defined]


def labels(fake_kube: FakeKube, pod: str = "train-job-0", namespace: str = "ml"
           ) -> dict[str, str]:
    """The labels of a pod of the fake API server."""
    found = fake_kube.pod(pod, namespace) or {}
    return dict(found.get("metadata", {}).get("labels") or {})


@contextlib.asynccontextmanager
async def served_api(controls: Any, token: str = "s3cret", **options: Any
                     ) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """A control API for ``controls`` on loopback, and a client that sends its token."""
    server = ControlServer(controls, token, listen_socket("127.0.0.1", 0), **options)
    await server.start()
    try:
        async with aiohttp.ClientSession(
            server.url, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            yield client, server.url
    finally:
        await server.stop()
