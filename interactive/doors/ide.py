"""Start the session's IDE (code-server, JupyterLab) or none, behind one small interface."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from interactive.base.identity import own_session_id
from interactive.base.settings import EditorSettings
from interactive.base.state import SessionState
from interactive.base.threads import in_thread

if TYPE_CHECKING:
    from server_bootstrap.config import CodeServerConfig

log = logging.getLogger(__name__)

PORT_ATTEMPTS = 3
"""Starts of code-server when its port is taken meanwhile (then on a port the system picks)."""
WITHOUT_IDE = ("the debugger and podcode resume/abort work without it: attach a desktop "
               "VS Code to the debugger (podcode status says where; for a session in a pod, "
               "podcode debug POD forwards it)")
"""What to do when the session has no IDE: advice that works here and from a laptop."""


def ide_address(kind: str, url: str, record: Path) -> str:
    """Where the session's IDE is, for its announcement (no secret: where it is)."""
    if kind == "jupyter":  # its own login page asks for the token
        return f"JupyterLab {url} (token: the \"password\" in {record})"
    return (f"VS Code {url} (podcode open / attach POD logs you in; password: the "
            f"\"password\" in {record})")


class Ide(Protocol):
    url: str
    pid: int | None
    """code-server's launcher: the idle monitor finds the rest of its tree from it."""

    async def supervise(self, changed: Callable[[str], object] = ...) -> None: ...

    async def stop(self) -> None: ...

    def pids(self) -> list[int]: ...


async def start_ide(
    editor: EditorSettings,
    *,
    workspace: Path,
    home: Path,
    bind: str,
    port: int,
    password: str | None,
    note: Callable[[str], None],
    session: str,
    installing: Callable[[], None] = lambda: None,
    launching: Callable[[], None] = lambda: None,
    forget: Callable[[str], None] = lambda text: None,
    config_root: Path | None = None,
    task: str = "",
) -> Ide | None:
    """code-server serving ``workspace``, ready; None with ``ide="none"``. With
    ``ide="jupyter"``, JupyterLab serving ``config_root`` and opening the starter notebook
    of ``task``'s session (:mod:`interactive.doors.notebook.jupyterlab`).

    When code-server cannot be found, installed or started, the session goes on
    without it (debugpy and the control API still serve): the error, which names
    the ways to provide code-server, is logged and shown in the status notes.
    ``installing`` is called before code-server is installed (when it is not found), after
    a note that says what is installed, where and how to avoid it (``forget`` drops it once
    the install ended); ``launching`` once its process is spawned (or will not be): until
    then the caller should leave the CPU to it (the spawn is the start of its boot).

    The control URL and token are not handed to code-server: its environment is
    readable in ``/proc`` for the life of every process it starts (terminals included).
    The companion extension reads them from the ``0600`` workspace file
    ``.vscode/podcode-session.json`` instead.
    """
    try:
        if editor.ide == "none":
            return None
        if editor.ide == "jupyter":
            return await _start_jupyter(config_root or workspace, home=home, bind=bind,
                                        port=port, password=password, note=note,
                                        session=session, task=task, launching=launching)
        from server_bootstrap.codeserver import CodeServer
        from server_bootstrap.config import CodeServerConfig
        from server_bootstrap.errors import BootstrapError, CodeServerStartError
        from server_bootstrap.locate import find_code_server

        loop = asyncio.get_running_loop()
        try:
            config = CodeServerConfig.from_environ()
            binary = await loop.run_in_executor(None, find_code_server, config)
            if binary is None:
                binary = await _install(config, note, forget, installing)
            for attempt in range(PORT_ATTEMPTS):
                server = CodeServer(
                    binary,
                    workspace=workspace,
                    bind=bind,
                    port=port,
                    # its own data for each session open at once in this process
                    data_dir=home / f"code-server{session.removeprefix(own_session_id())}",
                    password=password,
                    extensions=list(editor.extensions),
                    companion=True,
                    marker=session,  # the watchdog ends every process carrying it
                    skip_builtins=config.skip_builtins,
                    skip_outside_git=config.skip_outside_git,
                )
                try:
                    await server.start(spawned=launching)
                    break
                except CodeServerStartError as exc:
                    # It binds the port itself, so another process may take it first: then
                    # any port the system gives it (it says which; it cannot be taken).
                    if "EADDRINUSE" not in str(exc) or attempt == PORT_ATTEMPTS - 1:
                        raise
                    log.warning("port %d was taken as code-server started; using any free one",
                                port)
                    port = 0
        except BootstrapError as exc:
            _without_ide("code-server", exc, note)
            return None
        log.info("code-server serves %s at %s", workspace, server.url)
        return server
    finally:
        launching()


async def _start_jupyter(root: Path, *, home: Path, bind: str, port: int, password: str | None,
                         note: Callable[[str], None], session: str, task: str,
                         launching: Callable[[], None]) -> Ide | None:
    """JupyterLab for the session, ready; None (said in a note) when it cannot start."""
    from interactive.distributed import peers
    from interactive.doors.notebook import starter
    from interactive.doors.notebook.jupyterlab import (
        KERNEL_NAME,
        JupyterLab,
        kernel_spec,
        rank_kernels,
    )
    from interactive.doors.vscode_files import OWN_SESSION_FILE
    from server_bootstrap.errors import BootstrapError

    group = peers.current()
    own = kernel_spec(root / ".vscode" / OWN_SESSION_FILE.format(session), starter.label(
        task, None if group is None else group.info.local_rank))
    others = {} if group is None else group.other_records()
    server = JupyterLab(
        root=root, notebook=starter.notebook_path(root, session),
        folder=home / f"jupyter{session.removeprefix(own_session_id())}", bind=bind, port=port,
        password=password, kernels={KERNEL_NAME: own, **rank_kernels(task, others)},
        marker=session,
    )
    try:
        await server.start(spawned=launching)
    except BootstrapError as exc:
        _without_ide("JupyterLab", exc, note)
        return None
    log.info("JupyterLab serves %s at %s", root, server.url)
    return server


def _without_ide(name: str, why: Exception, note: Callable[[str], None]) -> None:
    """Say (in the log and the session's notes) that the session goes on without its IDE."""
    message = f"no IDE ({name}) for this session; {WITHOUT_IDE}. Why: {why}"
    log.error("%s", message)
    note(message)


async def _install(config: CodeServerConfig, note: Callable[[str], None],
                   forget: Callable[[str], None], installing: Callable[[], None]) -> Path:
    """Install code-server on a thread of its own, saying so in a note while it lasts.

    Not on the loop's pool: a process that ends (abort, a fix that succeeds) would wait
    for the pool's threads, and so for npm, minutes. Cancelled, the install is stopped
    (npm's processes ended, nothing kept) and the session closes at once."""
    from server_bootstrap.cancel import Cancel
    from server_bootstrap.install import install_notice
    from server_bootstrap.locate import ensure_code_server

    notice = install_notice(config)
    log.info("%s", notice)  # the session prints its notes when it opens
    note(notice)
    installing()
    cancel = Cancel()
    try:
        return await in_thread(lambda: ensure_code_server(config, cancel=cancel), "ide-install")
    except asyncio.CancelledError:
        cancel.cancel()
        raise
    finally:
        forget(notice)


async def keep_serving(ide: Ide, state: SessionState, moved: Callable[[str | None], None]) -> None:
    """Supervise the IDE for the session: its ``ide`` status says ``up``, ``restarting`` or
    ``down``; ``moved`` hears its URL after a restart (None once it is down for good), so
    that the record never keeps a dead address."""

    def changed(status: str) -> None:
        state.set(ide=status)
        if status == "up":
            log.warning("the IDE serves again at %s", ide.url)
            moved(ide.url)

    state.set(ide="up")
    try:
        await ide.supervise(changed)
    except Exception as exc:  # restarts used up: the debugger and the API still serve
        state.set(ide="down")
        message = f"the IDE stopped and could not be started again ({exc}); {WITHOUT_IDE}"
        log.error("%s", message)
        state.note(message)
        moved(None)
