"""The distributed example under ``torchrun --nproc-per-node 2``, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

import psutil

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "distributed" / "allreduce.py"
BUG = 'raise ValueError(f"bad batch on rank {rank}")'


def copy_example(workspace: Path, fixed: bool = False) -> Path:
    """``allreduce.py`` in ``workspace``; ``fixed``: with rank 1's bug replaced by ``pass``."""
    workspace.mkdir(parents=True, exist_ok=True)
    script = Path(shutil.copy(EXAMPLE, workspace / "allreduce.py"))
    if fixed:
        script.write_text(script.read_text().replace(BUG, "pass"))
    return script


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(
    workspace: Path, env: dict[str, str], out: IO[str] | int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """torchrun with two local ranks on loopback, running ``workspace/allreduce.py``."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "allreduce.py",
    ]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **env}
    return subprocess.Popen(
        command,
        cwd=workspace,
        env=environ,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_tree(proc: subprocess.Popen[bytes]) -> None:
    """torchrun starts its workers in sessions of their own: stop the whole tree."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
    except psutil.NoSuchProcess:
        tree = []
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs(tree, timeout=10)
    if proc.poll() is None:
        proc.wait(10)
