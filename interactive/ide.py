"""Start the session's IDE (code-server) or none, behind one small interface."""

from __future__ import annotations

import asyncio
import logging
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
    note: Callable[[str], None],
    installing: Callable[[], None] = lambda: None,
    launching: Callable[[], None] = lambda: None,
) -> Ide | None:
    """code-server serving ``workspace``, ready; None with ``ide="none"``.

    When code-server cannot be found, installed or started, the session goes on
    without it (debugpy and the control API still serve): the error, which names
    the ways to provide code-server, is logged and shown in the status notes.
    ``installing`` is called before code-server is installed (when it is not found),
    ``launching`` once its process is spawned (or will not be): until then the caller
    should leave the CPU to it (the spawn is the start of its boot).

    The control URL and token are not handed to code-server: its environment is
    readable in ``/proc`` for the life of every process it starts (terminals included).
    The companion extension reads them from the ``0600`` workspace file
    ``.vscode/podcode-session.json`` instead.
    """
    try:
        if settings.ide == "none":
            return None
        from server_bootstrap.config import CodeServerConfig
        from server_bootstrap.errors import BootstrapError
        from server_bootstrap.launch import CodeServer
        from server_bootstrap.locate import ensure_code_server, find_code_server

        loop = asyncio.get_running_loop()
        try:
            config = CodeServerConfig.from_environ()
            binary = await loop.run_in_executor(None, find_code_server, config)
            if binary is None:
                installing()
                binary = await loop.run_in_executor(None, ensure_code_server, config)
            server = CodeServer(
                binary,
                workspace=workspace,
                bind=settings.bind,
                port=port,
                data_dir=home / "code-server",
                password=password,
                extensions=list(settings.extensions),
                companion=True,
                marker=own_session_id(),  # the watchdog ends every process carrying it
            )
            await server.start(spawned=launching)
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
        launching()
