"""Start the session's IDE (code-server) or none, behind one small interface."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

from interactive.settings import Settings

log = logging.getLogger(__name__)


class Ide(Protocol):
    url: str

    async def supervise(self) -> None: ...

    async def stop(self) -> None: ...

    def pids(self) -> list[int]: ...


async def start_ide(
    settings: Settings,
    *,
    workspace: Path,
    home: Path,
    port: int,
    password: str | None,
    control_url: str,
    token: str,
) -> Ide | None:
    """code-server serving ``workspace``, ready; None with ``ide="none"``."""
    if settings.ide == "none":
        return None
    from server_bootstrap.config import CodeServerConfig
    from server_bootstrap.extensions import companion_vsix
    from server_bootstrap.launch import CodeServer
    from server_bootstrap.locate import ensure_code_server

    loop = asyncio.get_running_loop()
    binary = await loop.run_in_executor(None, ensure_code_server, CodeServerConfig.from_environ())
    data_dir = home / "code-server"
    companion = await loop.run_in_executor(None, companion_vsix, data_dir / "companion")
    server = CodeServer(
        binary,
        workspace=workspace,
        bind=settings.bind,
        port=port,
        data_dir=data_dir,
        password=password,
        env={"PODCODE_CONTROL_URL": control_url, "PODCODE_TOKEN": token},
        extensions=[companion, *(Path(spec) for spec in settings.extensions)],
    )
    await server.start()
    log.info("code-server serves %s at %s", workspace, server.url)
    return server
