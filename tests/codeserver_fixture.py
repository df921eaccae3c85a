"""pytest plugin: a real code-server, found or installed by podcode's own locator."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest

from server_bootstrap.codeserver import CodeServer
from server_bootstrap.config import CodeServerConfig
from server_bootstrap.errors import BootstrapError
from server_bootstrap.extensions import _run_cli
from server_bootstrap.locate import ensure_code_server


@pytest.fixture(scope="session")
def code_server_binary() -> Path:
    """code-server from PODCODE_CODE_SERVER_PATH, PATH or the shared cache, installed into
    the cache when missing (``podcode install`` does that ahead of time)."""
    try:
        return ensure_code_server(CodeServerConfig.from_environ())
    except BootstrapError as exc:
        pytest.skip(f"no code-server and it cannot be installed here: {exc}")


def code_server_processes(server: CodeServer) -> list[psutil.Process]:
    """Every live process started by ``server`` (found by the marker they all inherit)."""
    name, value = server.marker
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(name) == value and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return [proc for proc in found if proc.pid != os.getpid()]


@pytest.fixture
async def code_server_factory(
    code_server_binary: Path, tmp_path: Path
) -> AsyncIterator[Callable[..., CodeServer]]:
    """Make CodeServer objects (workspace and data folder under tmp_path); all are
    stopped at the end of the test."""
    made: list[CodeServer] = []

    def make(**overrides: Any) -> CodeServer:
        workspace = tmp_path / "workspace"
        workspace.mkdir(exist_ok=True)
        options: dict[str, Any] = {
            "workspace": workspace, "bind": "127.0.0.1", "port": 0,
            "data_dir": tmp_path / f"code-server-{len(made)}", "password": "test-password",
            "restart_delay": 0.0,
        }
        options.update(overrides)
        server = CodeServer(code_server_binary, **options)
        made.append(server)
        return server

    yield make
    for server in made:
        await server.stop()


@dataclass
class Files:
    """What the server serves, how often, and an optional gate holding responses."""

    content: dict[str, bytes | Path] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    requested: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event | None = None
    url: str = ""


@pytest.fixture
def http_files() -> Iterator[Files]:
    """A real HTTP server on 127.0.0.1 serving ``Files.content`` (bytes or a file)."""
    files = Files()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            files.hits[self.path] = files.hits.get(self.path, 0) + 1
            files.requested.set()
            if files.gate is not None:
                files.gate.wait(60)
            body = files.content.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            if isinstance(body, Path):
                self.send_header("Content-Length", str(body.stat().st_size))
                self.end_headers()
                with body.open("rb") as stream:
                    shutil.copyfileobj(stream, self.wfile, 1 << 20)
                return
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    files.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield files
    finally:
        if files.gate is not None:
            files.gate.set()
        server.shutdown()
        server.server_close()
        thread.join()


def serve(files: Files, name: str, body: bytes) -> tuple[str, str]:
    """Serve ``body`` at ``/name``; its URL and sha256."""
    files.content[f"/{name}"] = body
    return f"{files.url}/{name}", hashlib.sha256(body).hexdigest()


def list_extensions(binary: Path, extensions_dir: Path) -> list[str]:
    """The extension ids code-server itself finds in ``extensions_dir``."""
    done = _run_cli(binary, extensions_dir, ["--list-extensions"])
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]
