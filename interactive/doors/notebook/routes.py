"""The control API's notebook routes, behind the session's bearer token like every route:

- ``POST /api/notebook/open``: write the starter notebook (once) into the session's
  ``.vscode/podcode/`` folder; ``{"path", "created", "label", "cell"}`` (``cell``: the
  index of its empty code cell, where the IDE puts the cursor);
- ``POST /api/notebook/execute`` ``{"code": "..."}``: run a cell in the failed frame;
  ``{"outputs": [...], "ok", "execution_count"}`` once it ran (409 while the task is not
  waiting in the session); with ``"stream": true``, its prints as they come, then that
  answer (:mod:`.printed`);
- ``POST /api/notebook/interrupt``: ``{"result": "idle" | "interrupted" | "native"}``.

A cell runs on the kernel's own thread (:mod:`.kernel`), never on the loop that serves
these routes; the interrupt's wait (up to a second) runs off the loop too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from interactive.base import routes as paths
from interactive.base.phases import RESUMABLE
from interactive.base.state import SessionState
from interactive.base.threads import in_thread
from interactive.base.types import ExcInfo, TaskRef
from interactive.doors.notebook import here, printed, starter
from interactive.doors.notebook.kernel import FrameKernel, failed_frame

if TYPE_CHECKING:
    from interactive.base.settings import Settings
    from interactive.distributed.peers import Peers
    from interactive.storage.workspace import Snapshot

log = logging.getLogger(__name__)

BUSY_TOUCH_SECONDS = 30.0
"""While a cell runs, the session's activity is renewed this often (its thread is
podcode's, which the CPU sampler never counts)."""
RESUME_TIMEOUT_SECONDS = 60.0
"""How long ``here.resume()`` waits for the session to plan the resume."""


class Host(Protocol):
    """What the notebook needs of the session."""

    state: SessionState
    task: TaskRef
    workspace: Path
    config_root: Path
    home: Path
    id: str
    capture: Any
    settings: Settings
    peers: Peers | None
    """A distributed task's ranks (None for one process)."""
    snapshot: Snapshot | None
    """The workspace as the session opened: the starter notebook is watched from when
    it is written, so that the engineer's changes to it are saved with the edits."""

    def resume(self, peer: bool = False) -> dict[str, Any] | None: ...


class Notebook:
    """One session's notebook: its kernel and the starter notebook."""

    def __init__(self, host: Host, failure: Callable[[], ExcInfo | None]) -> None:
        self.host = host
        self.failure = failure
        self.kernel = FrameKernel(failure, host.workspace)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """What ``here`` offers the cells; ``loop`` is the session's, where resume runs."""
        host = self.host

        async def resume() -> dict[str, Any] | None:  # planning: off the loop
            return await in_thread(host.resume, "resume-plan")

        def inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
            from interactive.inputs.capture import load_inputs

            folder = host.capture.folder if host.capture is not None else None
            return load_inputs(host.task.name, host.home, folder=folder)

        if host.settings.editor.ide == "jupyter":  # JupyterLab opens it: there at once
            self._write_when_waiting(loop)
        self.kernel.helpers["session"] = here.SessionHelpers(
            failure=self.failure, inputs=inputs,
            resume=lambda: asyncio.run_coroutine_threadsafe(resume(), loop).result(
                RESUME_TIMEOUT_SECONDS),
            rerun_script=starter.rerun_script(host.config_root, host.task.name),
            home=host.home, workspace=host.workspace,
        )

    def _write_when_waiting(self, loop: asyncio.AbstractEventLoop) -> None:
        """Write the starter notebook (off the loop) when the session first waits."""
        stops: list[Callable[[], None]] = []

        def changed() -> None:
            if self.host.state.state not in RESUMABLE:
                return
            try:
                stops.pop()()  # once, whichever thread comes first
            except IndexError:
                return
            loop.call_soon_threadsafe(loop.run_in_executor, None, self._open_logged)

        stops.append(self.host.state.watch(changed))
        changed()

    def _open_logged(self) -> None:
        """Write the starter (the session presents the failure before it says it waits:
        the starter names the failed frame)."""
        try:
            self.open()
        except OSError as exc:
            log.warning("could not write the starter notebook: %s", exc)

    def open(self) -> dict[str, Any]:
        """Write the starter notebook unless it is there; where it is."""
        host, excinfo = self.host, self.failure()
        frame = failed_frame(excinfo, host.workspace) if excinfo is not None else None
        where = "?" if frame is None else f"{_shown(frame.f_code.co_filename, host.workspace)}" \
            f":{frame.f_lineno}"
        notebook = starter.render(host.task.name, host.state.error, where,
                                  starter.frame_source(frame))
        path = starter.notebook_path(host.config_root, host.id)
        created = starter.write_starter(path, notebook)
        watched = host.snapshot
        if created and watched is not None and path.resolve().is_relative_to(watched.root):
            watched.adopt(path.resolve().relative_to(watched.root).as_posix())
        local = host.peers.info.local_rank if host.peers is not None else None
        return {"path": str(path), "created": created,
                "label": starter.label(host.task.name, local), "cell": starter.SCRATCH_CELL}

    def close(self) -> None:
        self.kernel.close()


def _shown(filename: str, workspace: Path) -> str:
    """``filename`` relative to the workspace when it is inside."""
    path = Path(filename)
    return str(path.relative_to(workspace)) if path.is_relative_to(workspace) else filename


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": message}, status=status)


def add_routes(app: web.Application, notebook: Notebook,
               read_json: Callable[[web.Request], Any]) -> None:
    """The ``/api/notebook/*`` routes; ``read_json`` reads a request's JSON object body."""

    async def bind(app: web.Application) -> None:
        notebook.bind(asyncio.get_running_loop())

    async def open_(request: web.Request) -> web.Response:
        try:
            return web.json_response(await asyncio.to_thread(notebook.open))
        except OSError as exc:
            return _error(f"could not write the starter notebook: {exc}", 500)

    async def execute(request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        code = body.get("code")
        if not isinstance(code, str):
            return _error('expected {"code": "<the cell\'s Python source>"}', 400)
        state = notebook.host.state.state
        if state not in RESUMABLE or notebook.failure() is None:
            return _error(f"the task is {state}: cells run while it waits in the session", 409)
        if body.get("stream") is True:
            sent = printed.Printed(asyncio.get_running_loop())
            return await printed.stream(
                request, asyncio.wrap_future(notebook.kernel.execute(code, sent)), sent,
                notebook.host.state.touch, BUSY_TOUCH_SECONDS)
        running = asyncio.wrap_future(notebook.kernel.execute(code))
        while not running.done():  # a cell that runs is work: the session is not idle
            await asyncio.wait({running}, timeout=BUSY_TOUCH_SECONDS)
            notebook.host.state.touch()
        return web.json_response(running.result().as_dict())

    async def interrupt(request: web.Request) -> web.Response:
        result = await in_thread(notebook.kernel.interrupt, "notebook-interrupt")
        return web.json_response({"result": result})

    app.on_startup.append(bind)
    app.router.add_post(paths.NOTEBOOK_OPEN, open_)
    app.router.add_post(paths.NOTEBOOK_EXECUTE, execute)
    app.router.add_post(paths.NOTEBOOK_INTERRUPT, interrupt)
