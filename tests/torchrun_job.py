"""The distributed example under ``torchrun --nproc-per-node 2``, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "distributed" / "allreduce.py"
BUG = 'raise ValueError(f"bad batch on rank {rank}")'
CHECKSUM = re.compile(r"checksum (\S+)")
"""What the training examples' rank 0 prints at the end: the final weights' checksum."""


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
    workspace: Path,
    env: dict[str, str],
    out: IO[str] | int = subprocess.DEVNULL,
    script: tuple[str, ...] = ("allreduce.py",),
    nproc: int = 2,
    launcher: tuple[str, ...] = (),
    command: tuple[str, ...] | None = None,
) -> subprocess.Popen[bytes]:
    """torchrun with ``nproc`` local ranks on loopback, running ``workspace/<script>``
    (the script's name, then its arguments); ``launcher``: more of torchrun's own options;
    ``command``: another launcher instead of torchrun (``python`` for Lightning's own,
    ``accelerate launch ...``), followed by the script."""
    argv = [*command, *script] if command is not None else [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        *launcher,
        *script,
    ]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **env}
    return subprocess.Popen(
        argv,
        cwd=workspace,
        env=environ,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def agent(node_rank: int, nnodes: int, nproc: int, master_port: int) -> tuple[str, ...]:
    """torchrun's agent for one node (pod) of ``nnodes``, each with ``nproc`` ranks, the
    first node serving the job's store on loopback's ``master_port``: a ``command``
    for :class:`Torchrun`, followed by the script."""
    return (
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
        "--node-rank", str(node_rank), "--nproc-per-node", str(nproc),
        "--master-addr", "127.0.0.1", "--master-port", str(master_port),
    )


def c10d_agent(nnodes: int, nproc: int, endpoint_port: int, rdzv_id: str) -> tuple[str, ...]:
    """torchrun's agent for one node (pod) of ``nnodes`` under c10d's rendezvous on
    loopback's ``endpoint_port``: the node ranks go by the order the agents join, and the
    workers' ``MASTER_ADDR``/``MASTER_PORT`` name the store the first node's agent serves on
    a port of its choosing. A ``command`` for :class:`Torchrun`, followed by the script."""
    return (
        sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
        "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{endpoint_port}", "--rdzv-id", rdzv_id,
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


def free_run(count: int) -> int:
    """A port p with p .. p+count-1 free on loopback."""
    for _ in range(100):
        base = free_port()
        if base + count > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise AssertionError("no run of free ports")


class Torchrun:
    """A torchrun job of two ranks with podcode on, its output in ``torchrun.log``."""

    def __init__(
        self, workspace: Path, home: Path, script: tuple[str, ...] = ("allreduce.py",),
        nproc: int = 2, launcher: tuple[str, ...] = (), env: dict[str, str] | None = None,
        command: tuple[str, ...] | None = None,
    ) -> None:
        self.workspace, self.home, self.script = workspace, home, script
        self.log = workspace.parent / "torchrun.log"
        self.debug_port, self.control_port = free_run(nproc), free_run(nproc)
        env = {
            "PODCODE_ENABLE": "1",
            "PODCODE_HOME": str(home),
            "PODCODE_DEBUG_PORT": str(self.debug_port),
            "PODCODE_CONTROL_PORT": str(self.control_port),
            "PODCODE_MAX_IDLE_SECONDS": "3600",
            **(env or {}),
        }
        with open(self.log, "w") as out:
            self.proc = start(workspace, env, out, script, nproc, launcher, command)

    def output(self) -> str:
        return self.log.read_text()

    def record(self, local_rank: int) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(
                (self.home / f"rank-{local_rank}" / "session.json").read_text()
            )
        except (OSError, ValueError):
            return None
        return record

    def wait_waiting(
        self, local_rank: int, timeout: float = 90, attempt: int = 0
    ) -> dict[str, Any]:
        """Its record once it waits in a session (at ``attempt`` or later)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.record(local_rank)
            if record and record["state"] == "waiting" and (record.get("attempt") or 0) >= attempt:
                return record
            if self.proc.poll() is not None:
                raise AssertionError(f"torchrun exited ({self.proc.returncode}):\n{self.output()}")
            time.sleep(0.1)
        raise AssertionError(f"rank {local_rank} never waited:\n{self.output()}")

    def stop(self) -> None:
        stop_tree(self.proc)


PEER_HEADER = "X-Podcode-Peer"
"""A call that a rank forwarded: the rank that receives it does not forward it again."""


def post(record: dict[str, Any], path: str, alone: bool = False) -> tuple[int, Any]:
    """POST ``path`` to a session's control API; ``alone``: as if forwarded by a peer, so
    that this rank does not pass it on to the others."""
    headers = {"Authorization": f"Bearer {record['token']}", "Content-Type": "application/json"}
    if alone:
        headers[PEER_HEADER] = "1"
    request = urllib.request.Request(
        record["control_url"] + path, data=b"{}", method="POST", headers=headers
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def get(record: dict[str, Any], path: str) -> Any:
    request = urllib.request.Request(
        record["control_url"] + path, headers={"Authorization": f"Bearer {record['token']}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def with_bug(workspace: Path, bug: tuple[str, str], example: Path) -> Path:
    """``example`` copied into ``workspace`` with ``bug`` (what, by what) put in."""
    workspace.mkdir(parents=True, exist_ok=True)
    script = Path(shutil.copy(example, workspace / example.name))
    text = script.read_text()
    assert bug[0] in text
    script.write_text(text.replace(*bug))
    return script


def fix(script: Path, bug: tuple[str, str]) -> None:
    """Edit the file back as the user would (a newer mtime than the session's start)."""
    script.write_text(script.read_text().replace(bug[1], bug[0]))
    stamp = time.time_ns() + 10_000_000
    os.utime(script, ns=(stamp, stamp))


def checksums(output: str) -> list[str]:
    return CHECKSUM.findall(output)


def finish(job: Torchrun, timeout: float = 90) -> str:
    """The job's output once its launcher exits, successfully."""
    try:
        code = job.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the resumed job never ended:\n{job.output()}") from None
    assert code == 0, f"the job exited with {code}:\n{job.output()}"
    return job.output()


def reference(
    workspace: Path, example: Path, script: tuple[str, ...], command: tuple[str, ...] | None = None,
    env: dict[str, str] | None = None, nproc: int = 2,
) -> str:
    """The checksum that ``example`` (fixed) prints with podcode off, run as ``script`` by
    torchrun (``nproc`` ranks) or ``command``, with ``env`` added to the environment."""
    shutil.copy(example, workspace)
    log = workspace / "launcher.log"
    with open(log, "w") as out:
        proc = start(workspace, {**(env or {}), "PODCODE_ENABLE": "0"}, out, script, nproc,
                     command=command)
    try:
        code = proc.wait(180)
    finally:
        stop_tree(proc)
    output = log.read_text()
    assert code == 0 or torch_teardown_crash(output), output
    [found] = checksums(output)
    return found


TEARDOWN_CRASH = "terminate called without an active exception"


def torch_teardown_crash(output: str) -> bool:
    """Whether a run with podcode off printed its checksum and had a rank abort as its
    process exited: gloo's threads at interpreter teardown, after that rank's work (torch's
    own, at times on a loaded machine). With more ranks, one that is done may abort before
    rank 0 prints: rank 0's result needs no collective after the last step. The checksum
    is the reference all the same: the program had computed it. A run with podcode on is
    never excused."""
    return bool(checksums(output)) and TEARDOWN_CRASH in output


@contextlib.contextmanager
def job_with_bug(
    workspace: Path, home: Path, example: Path, bug: tuple[str, str], script: tuple[str, ...],
    **options: Any,
) -> Iterator[Torchrun]:
    """``example`` with ``bug`` put in, run as ``script`` with podcode on (``options``: the
    :class:`Torchrun`'s); its processes stopped at the end."""
    with_bug(workspace, bug, example)
    run = Torchrun(workspace, home, script, **options)
    try:
        yield run
    finally:
        run.stop()


def wait_left(job: Torchrun, local_rank: int, timeout: float = 30) -> None:
    """Until ``local_rank`` has left its session (it resumes, or waits to)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = job.record(local_rank)
        if record is not None and record["state"] != "waiting":
            return
        time.sleep(0.05)
    raise AssertionError(f"rank {local_rank} never left its session:\n{job.output()}")


def resume_one_by_one(
    job: Torchrun, bug: tuple[str, str], order: tuple[int, ...], timeout: float = 90
) -> str:
    """Every rank waits; fix the script, resume each rank's session alone, in ``order``, each
    once the one before has left its session; the job's output at its end."""
    ranks = [job.wait_waiting(rank) for rank in range(len(order))]
    fix(job.workspace / job.script[0], bug)
    for rank in order:
        assert post(ranks[rank], "/api/resume", alone=True)[0] == 202
        wait_left(job, rank)
    return finish(job, timeout)


def resume_and_finish(job: Torchrun, bug: tuple[str, str], timeout: float = 90) -> str:
    """Both ranks wait; fix the script, resume rank 0 (it tells rank 1); the job's output at
    its end."""
    ranks = [job.wait_waiting(0), job.wait_waiting(1)]
    fix(job.workspace / job.script[0], bug)
    assert post(ranks[0], "/api/resume")[0] == 202
    return finish(job, timeout)
