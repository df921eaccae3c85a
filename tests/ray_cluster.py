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
from collections.abc import Callable, Iterator
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
    """Ray's temp folder (short: Ray's socket paths must fit in 107 characters)."""
    dashboard: str | None = None
    """The jobs API (``ray job submit --address``), when the dashboard was started."""

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


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) == 0


@contextmanager
def ray_cluster(
    cpus: int = 4, dashboard: bool = False, prestart: bool = True,
) -> Iterator[Cluster]:
    """``prestart=False``: the first driver does not wait for ``cpus`` idle workers with no
    runtime environment, which no driver here can use (each ships its ``working_dir``), and
    the node does not start them."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port, jobs = _free_port(), _free_port()
    serving = (["--include-dashboard=true", "--dashboard-host=127.0.0.1",
                f"--dashboard-port={jobs}"] if dashboard else ["--include-dashboard=false"])
    with _ray(["--head", f"--port={port}", f"--num-cpus={cpus}", "--node-ip-address=127.0.0.1",
               *serving], temp, [port, jobs] if dashboard else [port], "Ray's head",
              settings={} if prestart else {"RAY_prestart_worker_first_driver": "0"}):
        yield Cluster(f"127.0.0.1:{port}", temp,
                      f"http://127.0.0.1:{jobs}" if dashboard else None)


@contextmanager
def ray_node(cluster: Cluster, ip: str, resources: str) -> Iterator[Cluster]:
    """A second node joined with ``ray start --address``, as a second pod's: an address of
    its own (``ip``, another loopback address) and a temp folder of its own, so its
    working_dir copies are its own. It has no CPU: only tasks that ask for one of its
    ``resources`` (JSON) run there. The node's view of the cluster comes back."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port = _free_port()
    with _ray([f"--address={cluster.address}", "--num-cpus=0", f"--resources={resources}",
               f"--node-ip-address={ip}", f"--node-manager-port={port}"], temp, [], "Ray's node",
              listening=lambda: _listening(port, ip)):
        yield Cluster(cluster.address, temp)


@contextmanager
def _ray(args: list[str], temp: Path, ports: list[int], what: str,
         listening: Callable[[], bool] | None = None,
         settings: dict[str, str] | None = None) -> Iterator[None]:
    """``ray start --block ARGS`` in a process group of its own, until it listens
    (``settings``: more of Ray's settings in its environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCODE_")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.update(settings or {}, RAY_TMPDIR=str(temp))
    started = subprocess.Popen(
        [RAY, "start", "--block", *args, "--disable-usage-stats", f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    ready = listening or (lambda: all(map(_listening, ports)))
    try:
        wait_until(lambda: ready() or started.poll() is not None, what, 120)
        if started.poll() is not None:
            raise RuntimeError(f"ray start exited with {started.returncode}")
        time.sleep(1.0)  # the raylet registers after it listens
        yield
    finally:
        family = [started.pid, *(p.pid for p in _descendants(started.pid))]
        os.killpg(started.pid, signal.SIGTERM)
        try:
            started.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(started.pid, signal.SIGKILL)
            started.wait(30)
        for pid in family:  # workers that left the group
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
