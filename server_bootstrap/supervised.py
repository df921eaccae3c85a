"""A server in a process group of its own: started, waited for, restarted, stopped.

The session's IDE servers, code-server (:class:`server_bootstrap.codeserver.CodeServer`)
and JupyterLab (in the notebook package), are served the same way, by a subclass of
:class:`SupervisedServer` that says what differs: its preparation, its command line and
environment (:meth:`SupervisedServer._command`), and when it is ready
(:meth:`SupervisedServer._until_ready`, often :meth:`SupervisedServer._wait_answering`).
The rest is here, once:

- the process starts in a session (so a process group) of its own, and its output's last
  lines are kept for the error that says why it did not start;
- a file that holds a secret only while the server starts (:attr:`Launch.secret`) is
  removed once it is ready or failed;
- :meth:`~SupervisedServer.supervise` starts it again when it exits, at most
  ``max_restarts`` times in all, a failed start counting as one of them;
- stopping ends its whole tree (the group, the launcher's descendants, every process
  carrying the marker): SIGTERM, then SIGKILL after ``stop_grace`` seconds.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from server_bootstrap.errors import ServerStartError
from server_bootstrap.probe import http_status
from server_bootstrap.process import stop_child_tree, tree_members

MARKER_VARIABLE = "PODCODE_SESSION_ID"
"""Set in a server's environment; every process it starts inherits it (terminals and
debug adapters included). Its value is the session's id when a session starts the server."""
TAIL_LINES = 40
"""Lines of the server's output kept for the error that says why it did not start."""


@dataclass(frozen=True)
class Launch:
    """One start of a server's process."""

    args: list[str]
    env: dict[str, str]
    cwd: Path
    secret: Path | None = None
    """A file the server reads only as it starts and that holds a secret: removed once the
    server is ready, or failed to be."""


class SupervisedServer:
    """One server process tree: :meth:`start`, :meth:`supervise`, :meth:`stop`. A subclass
    gives :meth:`_command` and :meth:`_until_ready`; the other hooks do nothing here."""

    name: ClassVar[str] = "the server"
    """What the log lines and errors call it."""
    error: ClassVar[type[ServerStartError]] = ServerStartError
    """What a start that fails, and restarts used up, raise."""
    launcher_pid: ClassVar[bool] = True
    """Whether :attr:`pid` names the launcher (the idle monitor finds the tree from it and
    leaves out of the activity the processes that run the launcher's executable); when
    False it stays None and every process of the tree counts."""

    def __init__(self, *, marker: str, max_restarts: int, restart_delay: float,
                 stop_grace: float, start_timeout: float) -> None:
        self.max_restarts = max_restarts
        self.restart_delay = restart_delay
        """Seconds between an exit and the next start."""
        self.stop_grace = stop_grace
        """Seconds the tree gets after SIGTERM before SIGKILL."""
        self.start_timeout = start_timeout
        """Seconds a start (the first, unless told otherwise, and each restart) may take."""
        self.restarts = 0
        self.url = ""
        self.pid: int | None = None
        self.ready = False
        """True while the server answers (after start, until it exits or is stopped)."""
        self._marker = marker
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._stopping = False
        self._log = logging.getLogger(type(self).__module__)

    @property
    def marker(self) -> tuple[str, str]:
        """The environment variable and value every process of this tree inherits."""
        return (MARKER_VARIABLE, self._marker)

    # -- what a server says about itself --------------------------------------------

    def _prepare(self) -> None:
        """Work done once, before the first start (on a thread of its own)."""

    async def _command(self) -> Launch:
        """Get ready for one start (files it reads, its URL); what to run."""
        raise NotImplementedError

    async def _until_ready(self, proc: asyncio.subprocess.Process, deadline: float) -> None:
        """Return once ``proc`` serves; raise :attr:`error` when it exits first or
        ``deadline`` (``time.monotonic()``) passes."""
        raise NotImplementedError

    def _heard(self, line: str) -> None:
        """A line of the server's output."""

    async def _served(self) -> None:
        """The server is ready."""

    def _stopped(self) -> None:
        """Its tree is stopped (after an exit, a failed start or :meth:`stop`)."""

    def _described(self) -> str:
        """The server, in an error message."""
        return self.name

    # -- the lifecycle --------------------------------------------------------------

    async def start(
        self, timeout: float | None = None, spawned: Callable[[], None] | None = None
    ) -> None:
        """Prepare, spawn, wait until the server is ready (:attr:`start_timeout` seconds
        unless ``timeout`` says otherwise); :attr:`error`, with its last output, when it
        exits or is not ready in time.

        ``spawned`` is called once, when the process exists (or its start failed): a
        caller with work of its own can leave the CPU to this start until then."""
        self._stopping = False
        told = False

        def tell() -> None:
            nonlocal told
            if spawned is not None and not told:
                told = True
                spawned()

        try:
            await asyncio.to_thread(self._prepare)
            await self._launch(self.start_timeout if timeout is None else timeout, tell)
        finally:
            tell()

    async def _launch(self, timeout: float, spawned: Callable[[], None] | None = None) -> None:
        deadline = time.monotonic() + timeout
        self._tail.clear()
        launch = await self._command()
        self._log.info("starting %s: %s", self.name, " ".join(launch.args))
        try:
            proc = self._proc = await asyncio.create_subprocess_exec(
                *launch.args, env=launch.env, cwd=str(launch.cwd),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            )
            self.pid = proc.pid if self.launcher_pid else None
            if spawned is not None:
                spawned()
            self._reader = asyncio.create_task(self._read_output(proc))
            try:
                if self._stopping:
                    raise self.error(f"{self.name} was stopped while it started")
                await self._until_ready(proc, deadline)
            except BaseException:
                await self._terminate()
                raise
        finally:
            if launch.secret is not None:
                launch.secret.unlink(missing_ok=True)
        self.ready = True
        await self._served()
        self._log.info("%s is ready at %s (pid %d)", self.name, self.url, proc.pid)

    async def _read_output(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self._tail.append(line)
            self._log.debug("%s: %s", self.name, line)
            self._heard(line)

    async def _wait_answering(self, path: str, deadline: float, poll: float) -> None:
        """Until ``GET {path}`` at :attr:`url` answers 200, every ``poll`` seconds."""
        proc = self._proc
        assert proc is not None
        while await http_status(self.url, path) != 200:
            if proc.returncode is not None:
                raise self.error(self._failure(f"exited with {proc.returncode}"))
            if time.monotonic() > deadline:
                probe = f"{self.url.rstrip('/')}{path}"
                raise self.error(self._failure(f"{probe} did not answer in time"))
            await asyncio.sleep(poll)

    def _failure(self, what: str) -> str:
        output = "\n".join(self._tail) or "(no output)"
        return f"{self._described()} {what}; its last output:\n{output}"

    def pids(self) -> list[int]:
        """Live processes of the server's tree: its launcher's descendants. The idle
        monitor asks at every poll, so this does not read every process's environment as
        stopping does (to find one that escaped)."""
        if self._proc is None:
            return []
        return sorted(proc.pid for proc in tree_members(None, self._proc.pid, None))

    async def supervise(self, changed: Callable[[str], object] = lambda _: None) -> None:
        """Wait on the server; start it again (at most :attr:`max_restarts` times, a start
        that fails counting as one) when it exits. ``changed`` hears ``"restarting"`` when
        it exits and ``"up"`` once it serves again (its :attr:`url` may be new).

        Runs until cancelled or until :meth:`stop`; raises :attr:`error` once the restarts
        are used up.
        """
        while True:
            if self._proc is None:
                raise self.error(f"{self.name} was not started: call start() first")
            code = await self._proc.wait()
            self.ready = False
            if self._stopping:
                return
            changed("restarting")
            await self._terminate()  # the launcher's children may outlive it
            if not await self._restart(f"exited with {code}"):
                return
            changed("up")

    async def _restart(self, why: str) -> bool:
        """Start again after ``why``; False when stopped meanwhile. Raises once the
        restarts are used up."""
        while True:
            if self.restarts >= self.max_restarts:
                raise self.error(
                    self._failure(f"{why} and was restarted {self.restarts} times already")
                )
            self.restarts += 1
            self._log.warning("%s %s; restarting it (%d of %d)",
                              self.name, why, self.restarts, self.max_restarts)
            await asyncio.sleep(self.restart_delay)
            if self._stopping:
                return False
            try:
                await self._launch(self.start_timeout)
                return True
            except ServerStartError as exc:
                if self._stopping:
                    return False
                self._log.warning("%s did not start again: %s", self.name, exc)
                why = "did not start again"

    async def stop(self) -> None:
        """Stop the server and every process it started. Safe to call twice."""
        self._stopping = True
        await self._terminate()

    async def _terminate(self) -> None:
        self.ready = False
        proc = self._proc
        if proc is not None:
            survivors = await stop_child_tree(proc, self.marker, self.stop_grace)
            if self._reader is not None:
                await self._reader
            if survivors:
                self._log.warning("%s processes still running after stop: %s",
                                  self.name, [p.pid for p in survivors])
        self._stopped()
