"""time_to_ide_ratio: from the exception to a waiting session with code-server answering
``/healthz`` and the configurations written, over a bare start of the same binary.

The task runs 1.5 s before it raises, as real tasks do; podcode uses that time to import
what a session needs in the background (``interactive.warmup``).
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

from server_bootstrap.config import CodeServerConfig
from server_bootstrap.locate import ensure_code_server

JOB = textwrap.dedent("""
    import time
    from interactive import vscode

    @vscode(port=0, control_port=0, debug_port=0)
    def task():
        time.sleep(1.5)  # a task fails after it ran a while, not at its first instruction
        with open("raised_at", "w") as out:
            out.write(repr(time.time()))
        raise RuntimeError("broken")

    if __name__ == "__main__":
        task()
""")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=2):  # noqa: S310
            return True
    except OSError:
        return False


def bare_start(binary: Path, root: Path) -> float:
    """code-server alone: spawn to /healthz."""
    port_file = root / "bare"
    port_file.mkdir()
    sock_port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(binary), "--bind-addr", f"127.0.0.1:{sock_port}", "--auth", "none",
         "--user-data-dir", str(port_file / "data"), "--extensions-dir", str(port_file / "ext"),
         "--disable-telemetry", "--disable-update-check", str(port_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        while not _healthy(f"http://127.0.0.1:{sock_port}"):
            time.sleep(0.01)
        return time.perf_counter() - started
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def session_start(root: Path) -> float:
    """A failing decorated task: exception to waiting + /healthz + launch.json."""
    workspace, home = root / "ws", root / "home"
    workspace.mkdir()
    (workspace / "job.py").write_text(JOB)
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "job.py"], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                record: dict[str, Any] = json.loads((home / "session.json").read_text())
            except (FileNotFoundError, ValueError):
                record = {}
            if record.get("state") == "waiting" and record.get("code_server_url"):
                ready = time.time()
                break
            if proc.poll() is not None:
                raise RuntimeError("the job exited before its session opened")
            time.sleep(0.005)
        assert _healthy(record["code_server_url"])
        assert (workspace / ".vscode" / "launch.json").exists()
        return ready - float((workspace / "raised_at").read_text())
    finally:
        proc.terminate()
        proc.wait(60)


def run(rounds: int = 7) -> list[dict[str, Any]]:
    binary = ensure_code_server(CodeServerConfig.from_environ())
    bare, ours = [], []
    for _ in range(rounds):  # interleaved: both see the same machine weather
        root = Path(tempfile.mkdtemp(prefix="podcode-bench-ide-"))
        try:
            bare.append(bare_start(binary, root))
            ours.append(session_start(root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    bare_s, ours_s = sorted(bare)[rounds // 2], sorted(ours)[rounds // 2]
    return [{"name": "time_to_ide_ratio", "value": round(ours_s / bare_s, 3), "unit": "x",
             "baseline": round(bare_s, 3), "goal": "<= 1.25"}]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
