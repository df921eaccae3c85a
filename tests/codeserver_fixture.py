"""pytest plugin: a real code-server, found or installed by podcode's own locator."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from server_bootstrap.config import CodeServerConfig
from server_bootstrap.errors import BootstrapError
from server_bootstrap.launch import CodeServer
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
