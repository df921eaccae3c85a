"""One debug session: open it on a failure, wait for the engineer, close it.

The session owns the collaborators (control API, debugpy post-mortem, IDE,
monitor, pod) and the event loop they run on. The decorated call blocks in
:meth:`Session.wait` on the main thread until a command arrives: resume,
abort, reaped or preempted.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interactive import configure, postmortem, record
from interactive.capture import CaptureReport, save_inputs
from interactive.configure import TaskRef
from interactive.errors import ResumeConflict
from interactive.ide import Ide, start_ide
from interactive.loop import LoopThread
from interactive.peers import Peers, PeerSampler, process_identity, rank_home, set_in_session
from interactive.peers import current as current_peers
from interactive.ports import bind_free, free_port, url_of
from interactive.settings import Settings, podcode_home
from interactive.state import SessionState
from interactive.types import Clock, ExcInfo, system_clock
from interactive.workspace import Snapshot

if TYPE_CHECKING:
    from interactive.control import ControlServer

log = logging.getLogger(__name__)

IDE_TIMEOUT_SECONDS = 60.0


def _port(url: str | None) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1]) if url else 0


@dataclass(frozen=True)
class Command:
    """What the waiting task is told to do."""

    kind: str  # "resume", "abort", "reaped", "preempted"
    detail: Any = None


@dataclass
class Endpoints:
    control_url: str = ""
    debug: tuple[str, int] = ("127.0.0.1", 0)
    code_server_url: str | None = None


@dataclass
class Session:
    """A debug session for one task; opened once, re-armed if the fixed task fails again."""

    task: TaskRef
    settings: Settings
    workspace: Path
    home: Path = field(default_factory=podcode_home)
    clock: Clock = system_clock
    state: SessionState = field(init=False)
    commands: queue.SimpleQueue[Command] = field(default_factory=queue.SimpleQueue)
    """SimpleQueue: ``put`` is safe inside the SIGTERM handler."""
    endpoints: Endpoints = field(default_factory=Endpoints)
    capture: CaptureReport | None = None
    snapshot: Snapshot | None = None
    pod: Any = None
    ide: Ide | None = None
    peers: Peers | None = field(default_factory=current_peers)
    """The other ranks of this pod (None: a single process)."""

    def __post_init__(self) -> None:
        self.base_home = self.home
        self.local_rank = 0
        if self.peers is not None:
            self.home = rank_home(self.home, self.peers.info)
            self.local_rank = self.peers.info.local_rank
        self.leader = True
        """Serves the pod's IDE, marks the pod, emails and deletes it (the first rank to
        open a session; always true for a single process)."""
        self.state = SessionState(
            self.task.name,
            clock=self.clock,
            owner=self.settings.owner,
            max_idle_seconds=self.settings.max_idle_seconds,
            grace_seconds=self.settings.grace_seconds,
        )
        self.token = secrets.token_urlsafe(32)
        self.password = secrets.token_urlsafe(18) if self.settings.auth == "password" else None
        self._loop: LoopThread | None = None
        self._control: ControlServer | None = None
        self._postmortem = postmortem.PostMortem()
        self._reload_base: Snapshot | None = None

    # -- the API's controls (called on the loop thread) -------------------------------
    def resume(self, peer: bool = False) -> None:
        """Resume this rank and (unless a peer asked) every other local rank in a session."""
        if self.state.state not in ("waiting", "warned"):
            raise ResumeConflict(f"cannot resume: the task is {self.state.state}")
        self.state.set(state="resuming", reap_at=None)
        self.commands.put(Command("resume"))
        self._tell_peers("resume", peer)

    def abort(self, peer: bool = False) -> None:
        self.commands.put(Command("abort"))
        self._tell_peers("abort", peer)

    def _tell_peers(self, command: str, peer: bool) -> None:
        if self.peers is not None and not peer:
            asyncio.get_running_loop().run_in_executor(None, self.peers.forward, command)

    def peer_status(self) -> dict[str, Any]:
        """The rank part of ``GET /api/status`` (empty for a single process)."""
        if self.peers is None:
            return {}
        return {"rank": self.peers.info.as_dict(), "ranks": self.peers.status()}

    def keepalive(self, seconds: float) -> float | None:
        from interactive.monitor import keepalive

        return keepalive(self.state, self.settings, seconds)

    # -- lifecycle (called on the main thread) -----------------------------------------
    def open(
        self, excinfo: ExcInfo | None, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Capture, configure, serve and record; returns once the session waits."""
        started = time.perf_counter()
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        set_in_session(True)
        self.leader = self.peers is None or self.peers.try_lead()
        bind = self.settings.bind
        control_sock = bind_free(bind, self._offset(self.settings.control_port), "control_port")
        self.endpoints.control_url = url_of(control_sock)
        serve_ide = self.settings.ide != "none" and self.leader
        ide_port = free_port(bind, self.settings.port, "port") if serve_ide else 0
        self._loop = LoopThread()
        # code-server takes the longest: start it first, set up the rest while it boots.
        launching = threading.Event()
        ide_future = self._loop.submit(
            start_ide(
                self.settings if serve_ide else replace(self.settings, ide="none"),
                workspace=self.workspace,
                home=self.home,
                port=ide_port,
                password=self.password,
                control_url=self.endpoints.control_url,
                token=self.token,
                note=self.state.note,
                launching=launching,
            )
        )
        launching.wait(IDE_TIMEOUT_SECONDS)  # our imports below would slow its start (GIL)
        from interactive.control import ControlServer  # aiohttp: imported while the IDE boots

        self._control = ControlServer(self, self.token, control_sock)
        self._loop.call(self._control.start())
        self.capture = save_inputs(self.task.name, fn, args, kwargs, self.home)
        for name in self.capture.failed:
            self.state.note(
                f"input {name!r} could not be saved; 'debug again' needs it supplied by hand"
            )
        debug_port = free_port(bind, self._offset(self.settings.debug_port), "debug_port")
        self.endpoints.debug = postmortem.listen(bind, debug_port)
        configure.write_configurations(
            self.workspace,
            self.task,
            home=self.home,
            debug=self.endpoints.debug,
            control={"control_url": self.endpoints.control_url, "token": self.token},
            ranks=self._rank_endpoints(),
            ide=self.settings.ide,
        )
        self.snapshot = Snapshot.take(self.workspace)  # after our own files: not edits
        self.ide = ide_future.result(IDE_TIMEOUT_SECONDS + 5)
        self.endpoints.code_server_url = self.ide.url if self.ide else None
        if self.ide is not None:
            self._loop.spawn(self.ide.supervise(), "ide-supervisor")
        self._arm(excinfo)
        self._loop.spawn(self._watch(), "monitor")
        log.info(
            "session for %s ready in %.2fs: control %s, debugpy %s:%d%s",
            self.task.name,
            time.perf_counter() - started,
            self._control.url,
            *self.endpoints.debug,
            f", IDE {self.endpoints.code_server_url}" if self.endpoints.code_server_url else "",
        )

    def _offset(self, port: int) -> int:
        """One port per local rank: ``port + local_rank`` (0 stays "any free port")."""
        return port + self.local_rank if port else 0

    def _rank_endpoints(self) -> list[configure.RankEndpoint]:
        """Where each local rank's debugger listens: its record's port, else the expected one."""
        if self.peers is None:
            return []
        known = {p.local_rank: p for p in self.peers.others() if p.alive}
        info = self.peers.info
        endpoints = []
        for local in range(info.local_world_size):
            if local == self.local_rank:
                host, port = self.endpoints.debug
            elif local in known and isinstance(known[local].record.get("debug"), dict):
                debug = known[local].record["debug"]
                host, port = str(debug["host"]), int(debug["port"])
            elif self.settings.debug_port:
                host, port = self.settings.bind, self.settings.debug_port + local
            else:
                continue
            endpoints.append(configure.RankEndpoint(local, host, port))
        return endpoints

    def _arm(self, excinfo: ExcInfo | None) -> None:
        error = None if excinfo is None else f"{excinfo[0].__name__}: {excinfo[1]}"
        self.state.set(state="waiting", error=error, attempt=self.state.attempt + 1, reap_at=None)
        self.state.touch()
        self._postmortem.present(excinfo)
        self._record()

    async def _watch(self) -> None:
        """Find the pod, mark it, then watch for idleness until reaped or closed."""
        from interactive.kube import PodClient
        from interactive.monitor import default_deps, run_monitor

        loop = asyncio.get_running_loop()
        if self.leader:  # one rank speaks for the pod
            self.pod = await loop.run_in_executor(None, PodClient.discover)
        if self.pod is not None:
            ports = {
                "code_server": _port(self.endpoints.code_server_url),
                "control": _port(self.endpoints.control_url),
                "debug": self.endpoints.debug[1],
            }
            await loop.run_in_executor(
                None,
                lambda: self.pod.mark_session(
                    task=self.task.name,
                    state=self.state.state,
                    owner=self.settings.owner,
                    ports=ports,
                    home=str(self.home),
                ),
            )
            for problem in self.pod.problems:  # e.g. a permission the Role lacks
                self.state.note(problem)
        ide = self.ide
        deps = default_deps(
            self.settings,
            self.state,
            workspace=self.workspace,
            pod=self.pod,
            ide_pids=lambda: ide.pids() if ide is not None else [],
        )
        if self.peers is not None:
            deps.samplers = [
                *deps.samplers,
                PeerSampler(self.peers, self.state.touch, self._record),
            ]
            if not self.leader:  # the leader warns the owner and deletes the pod
                deps.notifier = None
        await run_monitor(
            self.state, self.settings, deps, on_reap=lambda: self._reap(deps.notifier)
        )

    async def _reap(self, notifier: Any) -> None:
        from interactive.reaper import cleanup
        from interactive.store import open_store

        try:
            store = open_store()
        except Exception:
            log.exception("the store cannot be opened; the edits cannot be saved")
            store = None
        report = await cleanup(
            state=self.state,
            settings=self.settings,
            snapshot=self.snapshot,
            store=store,
            ide=self.ide,
            pod=self.pod,
            notifier=notifier,
            clock=self.clock,
        )
        self.ide = None if report.ide_stopped else self.ide
        self.commands.put(Command("reaped", report.edits_url))

    def save_edits(self) -> str | None:
        """Copy the engineer's edits to the store now (preemption); the store URL or None."""
        if self.snapshot is None or not self.snapshot.changed():
            return None
        from interactive.reaper import CleanupReport, save_edits
        from interactive.store import open_store

        try:
            return save_edits(
                CleanupReport(), self.snapshot, open_store(), self.task.name, self.clock()
            )
        except Exception:
            log.exception("could not save the edits of %s", self.task.name)
            return None

    def reload_base(self) -> Snapshot:
        """The workspace as of the last reload (at first: as the session opened); re-stamped
        now, so that the next resume reloads only what changes after this one."""
        base = self._reload_base or self.snapshot
        assert base is not None, "the session is not open"
        self._reload_base = Snapshot.take(self.workspace)
        return base

    def reopen(self, excinfo: ExcInfo) -> None:
        """The resumed task failed again: show the new exception, wait again."""
        self._arm(excinfo)

    def running(self) -> None:
        self.state.set(state="running")
        self._record()

    def _label(self) -> None:
        pod, loop = self.pod, self._loop
        if pod is not None and loop is not None:
            state = self.state.state
            loop.loop.call_soon_threadsafe(
                lambda: loop.loop.run_in_executor(None, pod.set_state, state)
            )

    def wait(self) -> Command:
        """Block the calling (main) thread until a command arrives."""
        debugpy = sys.modules.get("debugpy")
        if debugpy is not None:
            # Keep the waiting thread out of the debugger's "suspend all threads".
            debugpy.trace_this_thread(False)
        with postmortem.out_of_sight():  # not listed in the debugger's threads either
            command = self.commands.get()
        log.info("session for %s: %s", self.task.name, command.kind)
        return command

    def _record(self) -> None:
        self._label()
        host, port = self.endpoints.debug
        ide_url, password = self.endpoints.code_server_url, self.password
        if not self.leader and self.peers is not None:  # the pod's IDE is the leader's
            lead = self.peers.leader()
            ide_url = lead.record.get("code_server_url") if lead else None
            password = lead.record.get("password") if lead else None
        data = {
            "state": self.state.state,
            "task": self.task.name,
            "error": self.state.error,
            "attempt": self.state.attempt,
            "workspace": str(self.workspace),
            "control_url": self.endpoints.control_url,
            "token": self.token,
            "debug": {"host": host, "port": port},
            "code_server_url": ide_url,
            "password": password if ide_url else None,
            **process_identity(),
            "inputs": str(self.capture.folder) if self.capture else None,
            "last_activity": self.state.last_activity,
        }
        if self.peers is not None:
            data.update(rank=self.peers.info.as_dict(), leader=self.leader)
        self._write_record(data)

    def _write_record(self, data: dict[str, Any]) -> None:
        """This rank's ``session.json``; the leader's also where the CLI looks first."""
        record.write_session(self.home, data)
        if self.leader and self.home != self.base_home:
            record.write_session(self.base_home, data)

    def close(self, final_state: str) -> None:
        """Stop everything this session started; safe to call twice."""
        self.state.set(state=final_state)
        self._postmortem.stop()
        loop, self._loop = self._loop, None
        if loop is not None:
            if self.ide is not None:
                try:
                    loop.call(self.ide.stop(), 30)
                except Exception:
                    log.exception("could not stop the IDE")
            if self._control is not None:
                loop.call(self._control.stop(), 10)
            loop.stop()
        if self.pod is not None:
            self.pod.set_state(final_state)
        configure.remove_session_file(self.workspace)
        ended = {
            "state": final_state,
            "task": self.task.name,
            "error": self.state.error,
            "workspace": str(self.workspace),
            **process_identity(),
        }
        self._write_record(ended)
        if self.peers is not None:
            self.peers.release()
        set_in_session(False)
