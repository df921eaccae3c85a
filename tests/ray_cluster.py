"""A real local Ray cluster for the tests and benchmarks: ``ray start --head --block`` in a
process group of its own (stopped by its id, never ``ray stop``, which ends every Ray on
the machine), with none of podcode's settings in its environment."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.waiting import wait_until

RAY = str(Path(sys.executable).with_name("ray"))


@dataclass(frozen=True)
class Cluster:
    address: str
    temp: Path
    dashboard: str | None = None
    """The jobs API (``ray job submit --address``), when the dashboard was started."""
    """Ray's temp folder (short: Ray's socket paths must fit in 107 characters)."""

    def driver_env(self, **podcode: str) -> dict[str, str]:
        """A driver's environment: the cluster's address, and the PODCODE_* given."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PODCODE_")}
        env.update(RAY_ADDRESS=self.address, RAY_TMPDIR=str(self.temp), **podcode)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        return env

    def copies(self) -> list[Path]:
        """The working_dir copies the node unpacked."""
        return sorted(self.temp.glob("**/runtime_resources/working_dir_files/*"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def ray_cluster(cpus: int = 4, dashboard: bool = False) -> Iterator[Cluster]:
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port, jobs = _free_port(), _free_port()
    serving = (["--include-dashboard=true", "--dashboard-host=127.0.0.1",
                f"--dashboard-port={jobs}"] if dashboard else ["--include-dashboard=false"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCODE_")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env["RAY_TMPDIR"] = str(temp)
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
         "--node-ip-address=127.0.0.1", *serving, "--disable-usage-stats",
         f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wanted = [port, jobs] if dashboard else [port]
        wait_until(lambda: all(map(_listening, wanted)) or head.poll() is not None,
                   "Ray's head", 120)
        if head.poll() is not None:
            raise RuntimeError(f"ray start exited with {head.returncode}")
        time.sleep(1.0)  # the raylet registers after the GCS listens
        yield Cluster(f"127.0.0.1:{port}", temp,
                      f"http://127.0.0.1:{jobs}" if dashboard else None)
    finally:
        family = [head.pid, *(p.pid for p in _descendants(head.pid))]
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(30)
        for pid in family:  # workers that left the group
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
