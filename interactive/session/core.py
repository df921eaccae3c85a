"""One debug session: open it on a failure, wait for the engineer, close it.

The session owns the collaborators (control API, debugpy post-mortem, IDE,
monitor, publisher) and the event loop they run on. Each phase it enters is
published (:mod:`interactive.session.publish`). The decorated call blocks in
:meth:`Session.wait` on the main thread until a command arrives: resume,
abort, reaped or preempted (:class:`interactive.base.phases.CommandKind`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interactive.base import record
from interactive.base.errors import ResumeConflict, SessionError
from interactive.base.identity import (
    SESSION_VARIABLE,
    claim_session_id,
    others_open,
    process_identity,
    release_session_id,
)
from interactive.base.loop import LoopThread
from interactive.base.phases import RESUMABLE, CommandKind, Phase
from interactive.base.ports import bind_free, free_port, url_of
from interactive.base.record import SessionRecord
from interactive.base.settings import Settings, ensure_home, podcode_home
from interactive.base.state import SessionState
from interactive.base.threads import get_interruptibly
from interactive.base.types import Clock, ExcInfo, TaskRef, system_clock
from interactive.distributed.jobsession import ABORT, END
from interactive.distributed.peers import Peers, PeerSampler, rank_home, set_in_session
from interactive.distributed.peers import current as current_peers
from interactive.doors import vscode_files
from interactive.doors.desktop import Desktop
from interactive.doors.ide import Ide, ide_address, keep_serving, start_ide
from interactive.doors.language import language_server
from interactive.doors.ssh_start import record_fields, start_ssh
from interactive.inputs.capture import CaptureReport, save_session_inputs
from interactive.inputs.snapshot import CallSnapshot
from interactive.kube.labels import JobMark
from interactive.resume.plan import ArgShape, Resume, plan_resume
from interactive.session import postmortem
from interactive.session.across_pods import JobRole, JobSampler
from interactive.session.autosave import EditSaver, autosaving
from interactive.session.publish import Publisher
from interactive.session.watchdog import Watchdog, start_watchdog
from interactive.storage.workspace import Snapshot

if TYPE_CHECKING:
    from interactive.doors.control import ControlServer

log = logging.getLogger(__name__)

IDE_TIMEOUT_SECONDS = 60.0
"""How long the session waits for a code-server that is already installed to start."""
PLAN_WAIT_SECONDS = 120.0
"""How long a resume the job asked for waits for one being planned here (then one stands)."""
LEADER_END_SECONDS = 180.0  # the leader's cleanup: its own grace, the final email (120 s)


def make_home(home: Path, inner: Path) -> None:
    """``$PODCODE_HOME`` and this session's folder in it (0700), or a :class:`SessionError`
    that says how to fix it."""
    try:
        ensure_home(home, inner)
        probe = inner / f".probe-{os.getpid()}-{threading.get_ident()}"  # one per session
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SessionError(
            f"PODCODE_HOME={str(home)!r} is not writable ({exc.strerror or exc}): point "
            "PODCODE_HOME at a writable folder, such as an emptyDir volume"
        ) from None


def _port(url: str | None) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1]) if url else 0


@dataclass(frozen=True)
class Command:
    """What the waiting task is told to do."""

    kind: CommandKind
    detail: Any = None
    """RESUME: the planned :class:`Resume`; REAPED: where the edits were saved."""


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
            owner=self.settings.mail.owner,
            max_idle_seconds=self.settings.idle.max_idle_seconds,
            grace_seconds=self.settings.idle.grace_seconds,
        )
        self.id = ""
        """The session's name, given when it opens (its folder, the IDE's marker)."""
        self.token = secrets.token_urlsafe(32)
        password = self.settings.editor.auth == "password"
        self.password = secrets.token_urlsafe(18) if password else None
        self._loop: LoopThread | None = None
        self._control: ControlServer | None = None
        self._postmortem = postmortem.PostMortem()
        self._resume_base: Snapshot | None = None
        self._saver = EditSaver(self.task.name, self.state)
        self._task_fn: Any = None
        self._shape = ArgShape(0, ())
        self.config_root = self.workspace
        """Where the ``.vscode`` configurations are (the workspace unless it is read-only)."""
        self._ide_launched = threading.Event()
        self._ide_ready = threading.Event()
        self.notifier: Any = None
        self.notifier_known = threading.Event()  # set once the monitor chose the notifier
        self.ssh: Any = None
        """The SSH endpoint (:class:`interactive.doors.ssh.SshEndpoint`), if it serves."""
        self._publisher: Publisher | None = None
        self._watchdog: Watchdog | None = None
        self._resume_lock = threading.Lock()
        """Held while a resume plans: one at a time."""
        self.job: JobRole | None = None
        """Its part in the job's session across pods (None: a job on one pod)."""
        self.state.on_phase(self._phase_moved)

    # -- the API's controls (called off the loop: the API's handlers use a thread) ----------
    def resume(self, peer: bool = False, job: bool = False, wait: bool = False) -> dict[str, Any]:
        """Resume this rank and (unless a peer asked) every other local rank in a session;
        in a job over several pods (unless the job asked), every pod
        (:mod:`interactive.session.across_pods`).

        The edits are planned now: an edit that cannot be patched in place, or inputs
        that no longer fit the task, raise :class:`ResumeConflict` and the session waits on.
        Planning reads the workspace and may scan the heap (seconds on a large one): call
        it on a thread of its own, never on an event loop. One resume plans at a time: one
        asked while another plans (``wait``: once that one is planned), or a session that
        left the waiting phases while it planned (cleaned up, say), is refused with
        :class:`ResumeConflict`.
        """
        role = None if peer or job else self.job
        if role is not None:
            asked = role.before_resume()
            if asked is not None:
                return asked  # the job's session is on another pod: it resumes the job
        if not self._resume_lock.acquire(wait, PLAN_WAIT_SECONDS if wait else -1):
            raise ResumeConflict("cannot resume: a resume is being planned already")
        try:
            planned = self._plan()
            posted = role.post_resume() if role is not None else {}
            if not self.state.move(Phase.RESUMING, only_from=RESUMABLE, reap_at=None):
                raise ResumeConflict(f"cannot resume: the task is {self.state.state}")
            self.commands.put(Command(CommandKind.RESUME, planned))
        finally:
            self._resume_lock.release()
        self._tell_peers(CommandKind.RESUME, peer)
        return {**planned.plan.report(), **posted}

    def _plan(self) -> Resume:
        if self.state.state not in RESUMABLE:
            raise ResumeConflict(f"cannot resume: the task is {self.state.state}")
        base = self._resume_base
        if base is None:
            raise ResumeConflict("cannot resume: the session is not open")
        return plan_resume(base, self._task_fn, self._shape)

    @property
    def resume_base(self) -> Snapshot | None:
        """The workspace as the next resume measures its edits against: at the session's
        opening, then at the last resume."""
        return self._resume_base

    def patched(self, planned: Resume) -> None:
        """The plan was applied: the next resume patches what changes after it."""
        self._resume_base = planned.base

    def abort(self, peer: bool = False, job: bool = False) -> None:
        if self.job is not None and not (peer or job):
            self.job.post(ABORT)  # first: this process may end as soon as it is told
        self.commands.put(Command(CommandKind.ABORT))
        self._tell_peers(CommandKind.ABORT, peer)

    def _tell_peers(self, command: CommandKind, peer: bool) -> None:
        """Unless a peer asked (it tells the others itself), tell the other ranks."""
        if self._publisher is not None and not peer:
            self._publisher.tell_peers(command)

    def peer_status(self) -> dict[str, Any]:
        """The rank part of ``GET /api/status`` (empty for a single process)."""
        if self.peers is None:
            return {}
        job = {"job": self.job.status()} if self.job is not None else {}
        return {"rank": self.peers.info.as_dict(), "ranks": self.peers.status(), **job}

    def keepalive(self, seconds: float) -> float | None:
        from interactive.reaper.monitor import keepalive

        return keepalive(self.state, self.settings.idle, seconds)

    # -- lifecycle (called on the main thread) -----------------------------------------
    def open(
        self, excinfo: ExcInfo | None, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
        snapshot: CallSnapshot | None = None,
    ) -> None:
        """Capture, configure, serve and record; returns once the session waits.

        The IDE joins when it is ready: a code-server that must be installed first
        (minutes) never holds the session back; debugpy and the control API serve
        meanwhile and the status says the IDE is on its way. The stages, in order:"""
        started = time.perf_counter()
        self._task_fn, self._shape = fn, ArgShape.of(args, kwargs)
        control_sock = self._claim()
        self._join_job(excinfo)
        self._start_ide()
        self._start_watchdog()
        self._start_doors(control_sock)
        self._capture(fn, args, kwargs, snapshot)
        self.endpoints.debug = postmortem.listen(
            self.settings.ports.bind, self._offset(self.settings.ports.debug_port))
        self._configure()
        self._ide_ready.wait(IDE_TIMEOUT_SECONDS if self._ide_launched.is_set() else 0)
        self._say_where_edits_go()
        self._arm(excinfo)
        if self.job is not None:
            self.job.start()
        self._loop_thread().spawn(self._watch(), "monitor")
        self._announce()
        log.info(
            "session for %s ready in %.2fs: control %s, debugpy %s:%d%s",
            self.task.name,
            time.perf_counter() - started,
            self.endpoints.control_url,
            *self.endpoints.debug,
            f", IDE {self.endpoints.code_server_url}" if self.endpoints.code_server_url else "",
        )

    def _claim(self) -> socket.socket:
        """The session's name, home and role among the pod's ranks, its loop and publisher,
        and the control API's socket (bound now: the port is the session's from here on)."""
        self.id = claim_session_id()  # several sessions may wait in one process
        make_home(self.base_home, self.home)
        set_in_session(True)
        self.leader = self.peers is None or self.peers.try_lead()
        self.config_root = self._config_root()
        control_sock = bind_free(
            self.settings.ports.bind, self._offset(self.settings.ports.control_port),
            "control_port")
        self.endpoints.control_url = url_of(control_sock)
        self._loop = LoopThread()
        self._publisher = Publisher(
            self._loop, home=self.home, base_home=self.base_home, leader=self.leader,
            peers=self.peers, session=self.id,
        )
        return control_sock

    def _join_job(self, excinfo: ExcInfo | None) -> None:
        """A job over several pods: its session for this bug, and whether this pod serves it."""
        error = None if excinfo is None else f"{excinfo[0].__name__}: {excinfo[1]}"
        if self.job is not None:
            self.job.stop()
        self.job = JobRole.join(self, error)

    def _job_mark(self) -> JobMark | None:
        """The job over several pods this session is part of, as the pod's marks name it."""
        if self.job is None or self.peers is None:
            return None
        return self.job.job.mark(self.peers.info)

    @property
    def serves(self) -> bool:
        """This rank serves the IDE and mails the owner: the pod's leader, on the pod that
        serves the job's session."""
        return self.leader and (self.job is None or self.job.serves)

    def _start_ide(self) -> None:
        """code-server (or JupyterLab) takes the longest: it starts first, on the pod's
        leader, and the rest is set up while it boots."""
        if self.settings.editor.ide == "none" or not self.serves:
            return
        settled = threading.Event()
        self._loop_thread().spawn(self._serve_ide(settled, self.settings.ports.bind), "ide")
        settled.wait(IDE_TIMEOUT_SECONDS)  # our imports below would slow its start (GIL)

    def _start_watchdog(self) -> None:
        """The process that ends the IDE and clears the secrets if this one is killed."""
        paths = record.record_paths(self.home, self.base_home, self.id)
        self._watchdog = start_watchdog(paths, marker=(SESSION_VARIABLE, self.id))
        if self._watchdog is not None:
            self._loop_thread().spawn(self._watchdog.guard(), "watchdog")  # and kept alive

    def _start_doors(self, control_sock: socket.socket) -> None:
        """The control API (with the desktop editors', the notebook's and the agent's
        routes) and, where asyncssh is installed, the SSH endpoint."""
        from interactive.doors.control import ControlServer  # aiohttp: while the IDE boots

        self._control = ControlServer(self, self.token, control_sock, password=self.password
                                      if self.settings.editor.ide == "code-server" else None,
                                      editors=Desktop(self.workspace, lambda: self.ssh),
                                      failure=self._postmortem.excinfo,  # the notebook's frame
                                      agents=self.settings.editor.agents,
                                      secrets=(self.password,))  # JupyterLab's token too
        loop = self._loop_thread()
        loop.call(self._control.start())
        self.ssh = start_ssh(loop, self.settings, bind=self.settings.ports.bind,
                             workspace=self.workspace,
                             port=self._offset(self.settings.ports.ssh_port), session=self.id,
                             state=self.state)

    def _capture(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 snapshot: CallSnapshot | None) -> None:
        """The task's inputs saved for "debug again" and load_inputs(); what could not be
        kept as at the call becomes a note."""
        self.capture = save_session_inputs(
            self.task.name, fn, args, kwargs, self.home, self.settings.max_capture_bytes, snapshot,
            self.id,
        )
        for note in self.capture.notes():
            self.state.note(note)

    def _configure(self) -> None:
        """The ``.vscode`` files, then the workspace's snapshot (after them: podcode's own
        files are not edits), which the edits and the resume are measured against."""
        vscode_files.write_configurations(
            self.config_root,
            self.task,
            home=self.home,
            debug=self.endpoints.debug,
            control={"control_url": self.endpoints.control_url, "token": self.token},
            ranks=vscode_files.rank_endpoints(
                self.peers, self.endpoints.debug, self.settings.ports
            ),
            source=self.workspace,
            ide=self.settings.editor.ide,
            session=self.id,
            desktop=self.ssh is not None,
            language_server=language_server(self.settings, self.state.note),
            agents=self.settings.editor.agents,
        )
        self.snapshot = Snapshot.take(self.workspace)
        self._resume_base = self.snapshot

    def _loop_thread(self) -> LoopThread:
        if self._loop is None:
            raise RuntimeError("the session's loop starts when the session opens")
        return self._loop

    def _announce(self) -> None:
        """One line on the task's output: where the session is and what to do (no secret),
        then one per note (inputs that could not be kept as at the call, say)."""
        where = [f"debugger {self.endpoints.debug[0]}:{self.endpoints.debug[1]}"]
        if self.endpoints.code_server_url:
            path = record.session_dir(self.home, self.id) / record.FILE
            where.insert(0, ide_address(self.settings.editor.ide,
                                        self.endpoints.code_server_url, path))
        elif self.settings.editor.ide != "none" and self.serves and not self._ide_ready.is_set():
            where.insert(0, "VS Code when code-server is ready (podcode open / attach POD)")
        elif self.job is not None and not self.job.serves:
            where.insert(0, self.job.job.where())
        print(  # one write: a reader never sees the first line without its notes
            f"podcode: {self.task.name} waits in a debug session: {', '.join(where)}; "
            f"fix the code in {self.workspace}, then podcode resume (or abort)"
            + "".join(f"\npodcode: note: {note}" for note in self.state.notes),
            file=sys.stderr, flush=True,
        )

    def _config_root(self) -> Path:
        """Where ``.vscode`` goes: the workspace, or (read-only source) a folder in the home
        that the IDE opens beside it."""
        if vscode_files.writable(self.workspace):
            return self.workspace
        root = self.home / "ide-workspace"
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.state.note(
            f"the source folder {self.workspace} is read-only: fixes can be made and resumed "
            f"only where it is writable; the debug configurations are in {root}"
        )
        return root

    async def _serve_ide(self, settled: threading.Event, bind: str) -> None:
        """Start the IDE (installing code-server first if need be), then supervise it."""
        opens = self.workspace
        if self.config_root != self.workspace:
            opens = vscode_files.write_code_workspace(self.home, [self.workspace, self.config_root])

        def launching() -> None:
            self._ide_launched.set()
            settled.set()

        try:
            ide = await start_ide(
                self.settings.editor,
                workspace=opens,
                home=self.home,
                bind=bind,
                port=free_port(bind, self.settings.ports.port, "port"),
                password=self.password,
                note=self.state.note,
                session=self.id,
                installing=settled.set,
                launching=launching,
                forget=self.state.forget,
                config_root=self.config_root, task=self.task.name,  # JupyterLab's
            )
        finally:
            settled.set()
            self._ide_ready.set()
        if ide is None:
            return
        self.ide = ide
        self._ide_moved(ide.url)
        await keep_serving(ide, self.state, self._ide_moved)

    def _ide_moved(self, url: str | None) -> None:
        self.endpoints.code_server_url = url
        if self.state.state in RESUMABLE:
            self._record()  # the IDE joined a waiting session, restarted or stopped

    def _say_where_edits_go(self) -> None:
        """Say once, when the session opens, if a fix would not outlive the pod."""
        from interactive.storage.store import short_lived_store

        message = short_lived_store(mailed=bool(self.settings.mail.owner))
        if message is not None and message not in self.state.notes:  # once, not per resume
            log.warning("%s", message)
            self.state.note(message)

    def _offset(self, port: int) -> int:
        """One port per local rank: ``port + local_rank`` (0 stays "any free port")."""
        return port + self.local_rank if port else 0

    def _arm(self, excinfo: ExcInfo | None) -> None:
        error = None if excinfo is None else f"{excinfo[0].__name__}: {excinfo[1]}"
        self._postmortem.present(excinfo)  # first: whoever sees "waiting" finds the frame
        self.state.touch()
        already = self.state.state == Phase.WAITING
        self.state.move(Phase.WAITING, error=error, attempt=self.state.attempt + 1, reap_at=None)
        if already:  # the same phase: no listener heard it, the error is new
            self._record()

    def _phase_moved(self, before: Phase, after: Phase) -> None:
        """Every phase the session enters, whoever moved it (the task's thread, a resume's,
        the monitor's), is published: ``session.json``, the pod's label and ``GET
        /api/status`` agree. An ended phase is published by :meth:`close` (its record
        without the secrets)."""
        if not after.ended:
            self._record()

    async def _watch(self) -> None:
        """Find the pod, mark it, then watch for idleness until reaped or closed."""
        from interactive.kube import discover_pod
        from interactive.reaper.monitor import default_deps, run_monitor

        if self.leader:  # one rank speaks for the pod
            self.pod = await asyncio.to_thread(discover_pod)
        if self.pod is not None and self._publisher is not None:
            ports = {
                "code_server": _port(self.endpoints.code_server_url),
                "control": _port(self.endpoints.control_url),
                "debug": self.endpoints.debug[1],
                **({"ssh": self.ssh.port} if self.ssh is not None else {}),
            }
            await self._publisher.mark_pod(
                self.pod, task=self.task.name, owner=self.settings.mail.owner, ports=ports,
                job=self._job_mark(),
            )
            for problem in self.pod.problems:  # e.g. a permission the Role lacks
                self.state.note(problem)
        deps = default_deps(
            self.settings.idle,
            self.state,
            mail=self.settings.mail,
            workspace=self.workspace,
            pod=self._publisher.labelling(self.pod) if self._publisher and self.pod else self.pod,
            ide_pids=lambda: [self.ide.pid] if self.ide is not None and self.ide.pid else [],
        )
        self.notifier = deps.notifier
        self.notifier_known.set()
        deps.samplers = autosaving(deps.samplers, self.save_edits, self.clock(), self.state)
        deps.labels_pod = False  # the phases it enters are published (_phase_moved)
        if self.peers is not None:
            deps.samplers.append(PeerSampler(self.peers, self.state.touch, self._record))
            deps.samplers.append(JobSampler(self))
            if not self.serves:  # the leader of the session's pod warns the owner, deletes it
                deps.notifier = None
        await run_monitor(
            self.state, self.settings.idle, deps, on_reap=lambda: self._reap(deps.notifier)
        )

    async def _reap(self, notifier: Any) -> None:
        from interactive.reaper.cleanup import cleanup
        from interactive.storage.backends import open_store_or_none

        report = await cleanup(
            state=self.state,
            hooks=self.settings.hooks,
            snapshot=self.snapshot,
            store=await asyncio.to_thread(open_store_or_none),
            ide=self.ide,
            pod=None if others_open(self.id) else self.pod,  # they keep it: their IDE, task
            notifier=notifier,
            clock=self.clock,
        )
        self.ide = None if report.ide_stopped else self.ide
        if self.job is not None:  # the job's session: every pod's ranks end with it
            await asyncio.to_thread(self.job.post, END,
                                    f"the job's session was cleaned up ({self.state.state})")
        if self.peers is not None and not self.leader:  # the leader mails the owner, then ends
            await asyncio.to_thread(self.peers.outlive_leader, LEADER_END_SECONDS)
        self.commands.put(Command(CommandKind.REAPED, report.edits_url))

    def save_edits(
        self, when: float | None = None, *, stop: Callable[[], bool] | None = None
    ) -> str | None:
        """Copy the engineer's edits (since the session opened) to the store, into the folder
        of ``when`` (now by default), bounded (:class:`EditSaver`; ``stop`` is asked between
        two files); its URL, or None when nothing changed or on failure."""
        if self.snapshot is None or not self.snapshot.changed():
            return None
        try:
            when = self.clock() if when is None else when
            return self._saver.save(self.snapshot, when, stop)
        except Exception:
            log.exception("could not save the edits of %s", self.task.name)
            return None

    def deliver_fix(self) -> None:
        """The resumed task succeeded: save the fix, say where it is, mail it to the owner."""
        from interactive.session.fix import deliver_fix

        deliver_fix(self.task.name, self.save_edits(), self.snapshot, notifier=self._notifier,
                    pod=self.pod, clock=self.clock)

    def _notifier(self, timeout: float) -> Any:
        """Who mails the owner, once the monitor chose it (within ``timeout`` seconds)."""
        self.notifier_known.wait(timeout)
        return self.notifier

    def reopen(self, excinfo: ExcInfo) -> None:
        """The resumed task failed again: show the new exception, wait again (a job over
        several pods: in the job's session for this new bug)."""
        self._join_job(excinfo)
        self._arm(excinfo)
        if self.job is not None:
            self.job.start()

    def running(self) -> None:
        """The resumed task runs (published by :meth:`_phase_moved`)."""
        if self.job is not None:
            self.job.stop()
        self.state.move(Phase.RUNNING)

    def wait(self) -> Command:
        """Block the calling (main) thread until a command arrives."""
        debugpy = sys.modules.get("debugpy")
        if debugpy is not None:
            # Keep the waiting thread out of the debugger's "suspend all threads".
            debugpy.trace_this_thread(False)
        with postmortem.out_of_sight():  # not listed in the debugger's threads either
            command = get_interruptibly(self.commands)
        log.info("session for %s: %s", self.task.name, command.kind)
        if command.kind is CommandKind.PREEMPTED:  # saves end within the grace, between files
            self._saver.preempted(self.settings.hooks.preempt_grace_seconds)
            if self.job is not None:  # the job cannot go on without this pod's ranks
                self.job.post(END, f"pod {self.job.job.pod} is being stopped (SIGTERM)")
        return command

    def _record(self) -> None:
        """Publish the phase the session is in now (its record, the pod's label)."""
        if self._publisher is not None:
            self._publisher.publish(self._current_record)

    def _current_record(self) -> SessionRecord:
        host, port = self.endpoints.debug
        ide_url, password = self.endpoints.code_server_url, self.password
        if not self.leader and self.peers is not None:  # the pod's IDE is the leader's
            lead = self.peers.leader()
            ide_url = lead.record.code_server_url if lead else None
            password = lead.record.password if lead else None
        return SessionRecord(
            state=self.state.state,
            task=self.task.name,
            session=self.id,
            error=self.state.error,
            attempt=self.state.attempt,
            workspace=str(self.workspace),
            config_root=str(self.config_root),
            control_url=self.endpoints.control_url,
            token=self.token,
            debug_host=host,
            debug_port=port,
            code_server_url=ide_url, password=password, ide=self.settings.editor.ide,
            inputs=str(self.capture.folder) if self.capture else None,
            last_activity=self.state.last_activity,
            rank=self.peers.info.as_dict() if self.peers is not None else None,
            leader=self.leader if self.peers is not None else None,
            **record_fields(self.ssh),
            **process_identity(),
        )

    def _end_record(self) -> SessionRecord:
        """What the record says once the session closed: how to reach it is gone."""
        return SessionRecord(state=self.state.state, task=self.task.name, session=self.id,
                             error=self.state.error, workspace=str(self.workspace),
                             **process_identity())

    def close(self, final_state: Phase | str) -> None:
        """Stop everything this session started; safe to call twice. Every step runs, even
        when an earlier one fails (each failure is logged once)."""
        self.state.move(final_state)
        loop, self._loop = self._loop, None
        ide, self.ide = self.ide, None
        control, publisher = self._control, self._publisher
        steps: list[tuple[str, Callable[[], object]]] = [("the debugger", self._postmortem.stop)]
        if publisher is not None:  # its work runs on the loop: done or cancelled before it stops
            steps.append(("the session's publishing", publisher.close))
        if loop is not None:
            if ide is not None:
                steps.append(("the IDE", lambda: loop.call(ide.stop(), 30)))
            if control is not None:
                steps.append(("the control API", lambda: loop.call(control.stop(), 10)))
            if (ssh := self.ssh) is not None:
                steps.append(("the SSH endpoint", lambda: loop.call(ssh.stop(), 10)))
            steps.append(("the session's tasks", loop.stop))
        if publisher is not None:
            steps.append(("the pod's label and the session record",
                          lambda: publisher.finish(self._end_record())))
        restore = vscode_files.restore_workspace  # the token file, and .vscode as it was
        steps.append(("the .vscode files", lambda: restore(self.config_root, self.id)))
        if final_state == Phase.DONE:  # kept after a failure, an abort, a cleanup, for debugging
            folder = record.session_dir(self.home, self.id)  # the record and the captured inputs
            steps.append(("the captured inputs", lambda: shutil.rmtree(folder, ignore_errors=True)))
        if self.job is not None:
            steps.append(("the job's watch", self.job.stop))
        if self.peers is not None:
            steps.append(("the rank's lead", self.peers.release))
        for what, step in steps:
            try:
                step()
            except Exception:
                log.exception("closing the session of %s: could not stop %s", self.task.name, what)
        set_in_session(False)
        if self.id:
            release_session_id(self.id)
        watchdog, self._watchdog = getattr(self, "_watchdog", None), None
        if watchdog is not None:
            watchdog.stop()
