"""The supervised-server base with tiny real child processes: restarts up to the limit
(a failed start counting as one), stop of the whole group, the secret file removed."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from server_bootstrap.errors import CodeServerStartError, ServerStartError
from server_bootstrap.supervised import MARKER_VARIABLE, Launch, SupervisedServer

READY = "ready"

# Each start appends a line to ``runs``; the program is told its run's number.
CHILD = textwrap.dedent("""
    import pathlib, subprocess, sys, time
    runs = pathlib.Path(sys.argv[1])
    with runs.open("a") as out:
        out.write("run\\n")
    run = len(runs.read_text().split())
    plan = sys.argv[2].split(",")
    what = plan[min(run, len(plan)) - 1]
    if what == "fail":  # does not start: exits before it is ready
        print(f"cannot start: run {run}", flush=True)
        sys.exit(2)
    if what == "group":  # a grandchild that ignores SIGTERM, in the same group
        grandchild = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ignoring', flush=True); time.sleep(300)"], stdout=subprocess.PIPE)
        grandchild.stdout.readline()
    print("ready", flush=True)
    if what == "exit":  # ready, then exits
        print(f"bye from run {run}", flush=True)
        sys.exit(3)
    time.sleep(300)
""")


class Tiny(SupervisedServer):
    """A ``python -c`` program as the server: ready once it prints ``ready``."""

    name = "tiny"

    def __init__(self, folder: Path, plan: str, *, max_restarts: int = 2,
                 stop_grace: float = 0.2) -> None:
        super().__init__(marker=f"tiny-{os.getpid()}-{id(self)}", max_restarts=max_restarts,
                         restart_delay=0.0, stop_grace=stop_grace, start_timeout=30.0)
        self.folder, self.plan = folder, plan
        self.secret = folder / "secret"
        self.stopped = 0
        self._ready: asyncio.Event | None = None

    async def _command(self) -> Launch:
        self._ready = asyncio.Event()
        self.secret.write_text("only while it starts")
        args = [sys.executable, "-c", CHILD, str(self.folder / "runs"), self.plan]
        env = {**os.environ, MARKER_VARIABLE: self._marker}
        return Launch(args, env, self.folder, secret=self.secret)

    def _heard(self, line: str) -> None:
        if line == READY and self._ready is not None:
            self._ready.set()

    async def _until_ready(self, proc: asyncio.subprocess.Process, deadline: float) -> None:
        assert self._ready is not None
        ready = asyncio.ensure_future(self._ready.wait())
        exited = asyncio.ensure_future(proc.wait())
        await asyncio.wait({ready, exited}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        exited.cancel()
        if not self._ready.is_set():
            raise self.error(self._failure(f"exited with {proc.returncode}"))

    def _stopped(self) -> None:
        self.stopped += 1


def runs(folder: Path) -> int:
    return len((folder / "runs").read_text().split())


async def test_restarts_up_to_the_limit_then_gives_up_with_the_last_output(
    tmp_path: Path,
) -> None:
    server = Tiny(tmp_path, "exit")
    heard: list[str] = []
    await server.start()
    assert not server.secret.exists()  # removed once it is ready
    with pytest.raises(ServerStartError, match="(?s)exited with 3 and was restarted 2 "
                                               "times already.*bye from run 3"):
        await asyncio.wait_for(server.supervise(heard.append), 60)
    assert server.restarts == 2 and runs(tmp_path) == 3 and not server.ready
    assert heard == ["restarting", "up", "restarting", "up", "restarting"]
    assert server.pids() == []
    await server.stop()


async def test_a_failed_restart_is_tried_again_within_the_limit(tmp_path: Path) -> None:
    """Run 1 serves and exits, run 2 cannot start, run 3 serves: two restarts, one "up"."""
    server = Tiny(tmp_path, "exit,fail,serve")
    heard: list[str] = []
    await server.start()
    supervising = asyncio.ensure_future(server.supervise(heard.append))
    try:
        while heard[-1:] != ["up"]:
            assert not supervising.done(), supervising
            await asyncio.sleep(0.02)
        assert server.restarts == 2 and runs(tmp_path) == 3 and server.ready
        assert heard == ["restarting", "up"]
        assert server._proc is not None and server.pids() == [server._proc.pid]
        assert server.pid == server._proc.pid
    finally:
        await server.stop()
    assert await asyncio.wait_for(supervising, 30) is None  # stopped: it returns
    assert server.pids() == [] and not server.secret.exists()


async def test_one_failed_restart_too_many_is_the_error(tmp_path: Path) -> None:
    server = Tiny(tmp_path, "exit,fail", max_restarts=1)
    await server.start()
    with pytest.raises(ServerStartError, match="(?s)did not start again and was restarted "
                                               "1 times already.*cannot start: run 2"):
        await asyncio.wait_for(server.supervise(), 60)
    assert runs(tmp_path) == 2


async def test_a_start_that_fails_says_why_and_leaves_nothing(tmp_path: Path) -> None:
    server = Tiny(tmp_path, "fail")
    spawned: list[int] = []
    with pytest.raises(ServerStartError, match="(?s)tiny exited with 2.*cannot start: run 1"):
        await server.start(spawned=lambda: spawned.append(1))
    assert spawned == [1] and not server.secret.exists() and server.stopped == 1
    assert server.pids() == []


async def test_stop_ends_the_group_sigkill_for_what_ignores_sigterm(tmp_path: Path) -> None:
    server = Tiny(tmp_path, "group")
    await server.start()
    assert server._proc is not None
    tree = [psutil.Process(pid) for pid in server.pids()]
    assert len(tree) >= 2 and server._proc.pid in [p.pid for p in tree]
    grandchild = next(p for p in tree if "SIG_IGN" in " ".join(p.cmdline()))
    assert os.getpgid(grandchild.pid) == os.getpgid(server._proc.pid) != os.getpgid(0)
    await server.stop()
    assert not any(_alive(p) for p in tree)
    assert server.pids() == [] and server.stopped == 1
    await server.stop()  # twice is fine
    assert server.restarts == 0


async def test_supervise_before_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match="call start"):
        await Tiny(tmp_path, "serve").supervise()


def test_the_servers_errors_share_one_base() -> None:
    from interactive.doors.notebook.jupyterlab import JupyterLab, JupyterUnavailable
    from server_bootstrap.codeserver import CodeServer

    assert issubclass(CodeServerStartError, ServerStartError)
    assert issubclass(JupyterUnavailable, ServerStartError)
    assert CodeServer.error is CodeServerStartError and JupyterLab.error is ServerStartError
    assert CodeServer.launcher_pid and not JupyterLab.launcher_pid


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
