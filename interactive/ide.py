"""Start the session's IDE (code-server) or none, behind one small interface."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from interactive.identity import own_session_id
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
    note: Callable[[str], None],
    launching: threading.Event | None = None,
) -> Ide | None:
    """code-server serving ``workspace``, ready; None with ``ide="none"``.

    When code-server cannot be found, installed or started, the session goes on
    without it (debugpy and the control API still serve): the error, which names
    the ways to provide code-server, is logged and shown in the status notes.
    ``launching`` is set once code-server is about to be spawned (or will not be).
    """
    launching = launching or threading.Event()
    try:
        if settings.ide == "none":
            return None
        from server_bootstrap.config import CodeServerConfig
        from server_bootstrap.errors import BootstrapError
        from server_bootstrap.launch import CodeServer
        from server_bootstrap.locate import ensure_code_server

        loop = asyncio.get_running_loop()
        try:
            config = CodeServerConfig.from_environ()
            binary = await loop.run_in_executor(None, ensure_code_server, config)
            server = CodeServer(
                binary,
                workspace=workspace,
                bind=settings.bind,
                port=port,
                data_dir=home / "code-server",
                password=password,
                env={"PODCODE_CONTROL_URL": control_url, "PODCODE_TOKEN": token},
                extensions=list(settings.extensions),
                companion=True,
                marker=own_session_id(),  # the watchdog ends every process carrying it
            )
            launching.set()
            await server.start()
        except BootstrapError as exc:
            message = (
                f"no IDE for this session, attach a desktop VS Code instead (podcode debug): {exc}"
            )
            log.error("%s", message)
            note(message)
            return None
        log.info("code-server serves %s at %s", workspace, server.url)
        return server
    finally:
        launching.set()
