"""time_to_ide_ratio: from the task's exception to code-server answering ``/healthz``,
over a bare start of the same code-server with the same flags and extensions.

Each run, interleaved with the baseline's:

- podcode: a decorated task runs 1.5 s (a task fails after it ran a while; podcode
  uses that time to prepare a session in the background, ``interactive.task.warmup``),
  writes the time, and raises. The benchmark polls ``/healthz`` on the session's
  code-server port every 5 ms from that moment. Also timed: until the session's record
  says ``waiting`` with the IDE's address (debugger, control API and ``.vscode``
  configurations ready as well): ``time_to_session_ratio``.
- baseline: the same code-server binary spawned by itself with podcode's own command
  line (``server_bootstrap.codeserver.command_line``: the same flags, password auth with
  the same config file, login strings) over a data folder prepared beforehand with
  the same user settings and the same companion extension installed; spawn to
  ``/healthz``, polled the same way.

Run: ``python benchmarks/bench_ide.py`` (needs code-server).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RUNS, ratio  # noqa: E402
from server_bootstrap.builtins import SKIPPED, builtin_folder, skipped_for  # noqa: E402
from server_bootstrap.codeserver import (  # noqa: E402
    LOGIN_HINT,
    command_line,
    config_text,
    takes_login_strings,
    write_private,
    write_user_settings,
)
from server_bootstrap.config import CodeServerConfig  # noqa: E402
from server_bootstrap.extensions import install_companion  # noqa: E402
from server_bootstrap.locate import ensure_code_server  # noqa: E402

POLL_SECONDS = 0.005
JOB = textwrap.dedent("""
    import os, time
    from interactive import vscode

    @vscode(port=int(os.environ["BENCH_PORT"]), control_port=0, debug_port=0)
    def task():
        time.sleep(1.5)  # a task fails after it ran a while, not at its first instruction
        with open("raised_at.tmp", "w") as out:
            out.write(repr(time.time()))
        os.replace("raised_at.tmp", "raised_at")
        raise RuntimeError("broken")

    if __name__ == "__main__":
        task()
""")


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=2):  # noqa: S310
            return True
    except OSError:
        return False


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bare_command(binary: Path, root: Path, port: int) -> list[str]:
    """podcode's command line for this code-server, over a data folder prepared now."""
    data = root / "bare"
    for folder in (data, data / "user-data", data / "extensions", root / "bare-ws"):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_user_settings(data / "user-data" / "User" / "settings.json")
    install_companion(data / "extensions")
    strings = None
    if takes_login_strings(binary):
        strings = data / "login-strings.json"
        write_private(strings, json.dumps({"LOGIN_PASSWORD": LOGIN_HINT}))
    config = data / "config.yaml"
    write_private(config, config_text("bench-password"))
    return command_line(binary, workspace=root / "bare-ws", bind="127.0.0.1", port=port,
                        data_dir=data, auth="password", config=config, login_strings=strings,
                        builtins=builtin_folder(binary, data / "builtin-extensions",
                                                skipped_for(root / "bare-ws", SKIPPED)))


def bare_start(binary: Path, root: Path) -> float:
    """code-server alone: spawn to /healthz."""
    port = free_port()
    args = bare_command(binary, root, port)
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        while not healthy(f"http://127.0.0.1:{port}"):
            if proc.poll() is not None:
                raise RuntimeError("the bare code-server exited")
            time.sleep(POLL_SECONDS)
        return time.perf_counter() - started
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the job ended (or hung) before it failed")
        time.sleep(POLL_SECONDS / 5)


def _wait_waiting(home: Path, proc: subprocess.Popen[bytes]) -> float:
    while True:
        try:
            record: dict[str, Any] = json.loads((home / "session.json").read_text())
        except (FileNotFoundError, ValueError):
            record = {}
        if record.get("state") == "waiting" and record.get("code_server_url"):
            return time.time()
        if proc.poll() is not None:
            raise RuntimeError("the job exited before its session opened")
        time.sleep(POLL_SECONDS)


def session_start(root: Path) -> tuple[float, float]:
    """A failing decorated task: (exception to /healthz, exception to a waiting session)."""
    workspace, home = root / "ws", root / "home"
    workspace.mkdir()
    (workspace / "job.py").write_text(JOB)
    port = free_port()
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "BENCH_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "job.py"], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(workspace / "raised_at", proc)
        while not healthy(f"http://127.0.0.1:{port}"):
            if proc.poll() is not None:
                raise RuntimeError("the job exited before code-server answered")
            time.sleep(POLL_SECONDS)
        answered = time.time()
        waiting = _wait_waiting(home, proc)
        assert (workspace / ".vscode" / "launch.json").exists()
        raised = float((workspace / "raised_at").read_text())
        return answered - raised, waiting - raised
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def run(rounds: int = max(RUNS, 7)) -> list[dict[str, Any]]:
    binary = ensure_code_server(CodeServerConfig.from_environ())
    bare: list[float] = []
    ide: list[float] = []
    waiting: list[float] = []
    for index in range(rounds):  # interleaved, alternating which goes first
        root = Path(tempfile.mkdtemp(prefix="podcode-bench-ide-"))
        try:
            if index % 2:
                bare.append(bare_start(binary, root))
            answered, ready = session_start(root)
            ide.append(answered)
            waiting.append(ready)
            if not index % 2:
                bare.append(bare_start(binary, root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    what = "a bare start of the same code-server, same command line and extensions"
    return [
        ratio("time_to_ide_ratio", ide, bare, speedup=False, unit="x", goal="<= 1.25",
              baseline_is=what, measures="task exception to code-server /healthz"),
        ratio("time_to_session_ratio", waiting, bare, speedup=False, unit="x",
              goal="none: what follows /healthz", baseline_is=what,
              measures="task exception to the session waiting (IDE, debugger, configs ready)"),
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
