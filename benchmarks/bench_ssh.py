"""SSH into a waiting session: the time to a command's output, and what the endpoint costs
a session that nobody uses.

A real failing task (``ide="none"``, every port 0) waits in its session; its "pod" is
marked in the in-process fake Kubernetes API server (``tests/fake_kube.py``), which
relays the port-forward to this machine. podcode's key pair is made, pushed and its
host key pinned by one run before the timed ones (a user's first ``ssh-config``).

``ssh_connect_s``: from ``podcode ssh-config POD -n NS`` (a fresh process) to the output
of ``ssh -F cfg -o BatchMode=yes podcode-POD 'echo ...'``, whose ``ProxyCommand`` is
``podcode ssh-proxy``: the session found through the API server, the key pushed over the
control API, the bytes relayed through a port-forward stream. Baseline, in the same
run (interleaved): the same ``ssh`` command, with the same options, key and
``known_hosts``, straight to the session's port on loopback (no ``ssh-config``, no
proxy, no port-forward). ``ssh_connect_local_s``: the same as ``ssh_connect_s`` for the
session on this machine (``podcode ssh-config`` with no pod: the proxy connects over
loopback), against the same baseline. Each entry also gives the median ratio to the
baseline, pair by pair (``x_baseline``), and how the time splits between ``ssh-config``
(``ssh_config_s``) and ``ssh`` through the proxy (``ssh_through_proxy_s``). Goals,
absolute: 2 s through a cluster, 1 s on this machine.

``ssh_idle_cpu_s_per_min`` and ``ssh_rss_added_mb``: a waiting session with SSH on (the
default) and one with ``PODCODE_SSH=0``, started side by side (which one first
alternates) and measured over the same window of ``PODCODE_BENCH_SSH_IDLE_SECONDS``
(20) once both wait: CPU seconds per minute of the task's process (and any process it
started: the session's watchdog), and the resident memory they hold at the end of the
window. The SSH-off session is the baseline of both; the memory figure is the
difference, pair by pair. Goals, absolute: at most 0.3 CPU s/min (0.5% of a core) for
the session with SSH (``added_median``: the difference, pair by pair), at most 20 MB
added.

Run: ``python benchmarks/bench_ssh.py`` (needs the OpenSSH client and asyncssh: the
``[ssh]`` extra).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import usage  # noqa: E402
from benchmarks.harness import RUNS, figure  # noqa: E402
from tests.fake_kube import FakeKube  # noqa: E402
from tests.session_fixture import Job  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

POD, NAMESPACE = "train-ssh-0", "ml"
IDLE_SECONDS = float(os.environ.get("PODCODE_BENCH_SSH_IDLE_SECONDS", "20"))
SETTLE_SECONDS = 2.0
"""After both sessions wait: what a session does once as it opens is not idle cost."""
COMMAND_TIMEOUT = 60.0
MARK = "podcode-bench-ssh"
JOB = """
from interactive import vscode

@vscode(ide="none", port=0, control_port=0, debug_port=0, ssh_port=0)
def task(x):
    return 1 / x

if __name__ == "__main__":
    print("result", task(0))
"""


def _require_openssh() -> str:
    client = shutil.which("ssh")
    if client is None or shutil.which("ssh-keygen") is None:
        raise RuntimeError("bench_ssh needs the OpenSSH client (ssh and ssh-keygen on PATH): "
                           "apt-get install openssh-client, brew install openssh")
    try:
        import asyncssh  # noqa: F401
    except ImportError:
        raise RuntimeError("bench_ssh needs asyncssh for the session's SSH endpoint: "
                           "pip install 'podcode[ssh]'") from None
    return client


def _checked(argv: list[str], env: dict[str, str], what: str) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                          timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def _start(job: Job, env: dict[str, str]) -> dict[str, Any]:
    """Start ``job`` with ``env``; its session's record once it waits."""
    job.write("job.py", JOB)
    job.start(env={"PODCODE_SSH_PORT": "0", **env})
    return job.wait_state("waiting", timeout=120)


class Connect:
    """The three ways to one waiting session's ``echo``, each a timed sample."""

    def __init__(self, root: Path, client: str, fake: FakeKube, record: dict[str, Any]) -> None:
        self.root = root
        self.client = client
        self.env = {**os.environ, "PODCODE_HOME": str(root / "home"),
                    "XDG_CONFIG_HOME": str(root / "xdg"), "KUBECONFIG": str(fake.kubeconfig)}
        for name in ("PODCODE_NAMESPACE", "PODCODE_CONTEXT", "POD_NAME", "POD_NAMESPACE"):
            self.env.pop(name, None)
        self.port = int(record["ssh"]["port"])
        self.runs = 0
        self.config_seconds: dict[str, list[float]] = {"cluster": [], "local": []}
        """Of each sample, the time ``podcode ssh-config`` took (the rest is ``ssh``)."""

    def _ssh(self, config: Path, alias: str) -> None:
        argv = [self.client, "-F", str(config), "-o", "BatchMode=yes", alias, f"echo {MARK}"]
        out = _checked(argv, self.env, f"ssh {alias}")
        if out.strip() != MARK:
            raise RuntimeError(f"ssh {alias} printed {out!r}, not {MARK!r}")

    def _through_podcode(self, kind: str, pod: list[str], alias: str) -> float:
        self.runs += 1
        config = self.root / f"config-{self.runs}"
        started = time.perf_counter()
        block = _checked([sys.executable, "-m", "interactive.cli", "ssh-config", *pod],
                         self.env, "podcode ssh-config")
        config.write_text(block)
        configured = time.perf_counter()
        self._ssh(config, alias)
        self.config_seconds[kind].append(configured - started)
        return time.perf_counter() - started

    def cluster(self) -> float:
        """``podcode ssh-config POD -n NS``, then ``ssh`` through the port-forward."""
        return self._through_podcode("cluster", [POD, "-n", NAMESPACE], f"podcode-{POD}")

    def local(self) -> float:
        """``podcode ssh-config`` for the session on this machine, then ``ssh``."""
        return self._through_podcode("local", [], "podcode-local")

    def direct_config(self) -> Path:
        """podcode's own ``Host`` block without its ``ProxyCommand``: the session's port on
        loopback, the same key, ``known_hosts`` and options."""
        block = _checked([sys.executable, "-m", "interactive.cli", "ssh-config", "--alias",
                          "podcode-direct"], self.env, "podcode ssh-config")
        lines = [line for line in block.splitlines()
                 if not line.strip().startswith("ProxyCommand")]
        lines[1:1] = ["  HostName 127.0.0.1", f"  Port {self.port}"]
        path = self.root / "config-direct"
        path.write_text("\n".join(lines) + "\n")
        return path

    def direct(self, config: Path) -> float:
        """The baseline: the same ``ssh`` straight to the session's port."""
        started = time.perf_counter()
        self._ssh(config, "podcode-direct")
        return time.perf_counter() - started


def connect_figures(client: str, runs: int = RUNS) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="podcode-bench-ssh-") as scratch, \
            ExitStack() as stack:
        root = Path(scratch)
        (root / "kube").mkdir()
        fake = FakeKube(root / "kube").start()
        stack.callback(fake.stop)
        fake.add_pod(POD, NAMESPACE)
        workspace = root / "workspace"
        workspace.mkdir()
        job = Job(workspace, root / "home")
        stack.callback(job.stop)
        record = _start(job, {"POD_NAME": POD, "POD_NAMESPACE": NAMESPACE,
                              "KUBECONFIG": str(fake.kubeconfig), "PODCODE_SSH": "1"})
        wait_until(lambda: ((fake.pod(POD, NAMESPACE) or {}).get("metadata", {})
                            .get("labels", {}).get("podcode.io/session") == "true"),
                   "the pod's session label", 60)
        connect = Connect(root, client, fake, record)
        connect.cluster()  # the key pair made and pushed, the host key pinned: untimed
        connect.local()
        direct = connect.direct_config()
        connect.direct(direct)
        order: list[tuple[str, Callable[[], float]]] = [
            ("cluster", connect.cluster), ("direct", lambda: connect.direct(direct)),
            ("local", connect.local)]
        samples: dict[str, list[float]] = {name: [] for name, _ in order}
        connect.config_seconds = {"cluster": [], "local": []}  # the timed runs only
        for index in range(runs):  # each goes first, middle and last in turn
            turn = index % len(order)
            for name, sample in order[turn:] + order[:turn]:
                samples[name].append(sample())
    baseline_is = ("the same ssh command (same options, key, known_hosts) straight to the "
                   "session's port on loopback: no ssh-config, no proxy, no port-forward")

    def split(kind: str) -> dict[str, float]:
        config = connect.config_seconds[kind]
        return {
            "x_baseline": round(statistics.median(
                [ours / theirs for ours, theirs in zip(samples[kind], samples["direct"],
                                                       strict=True)]), 2),
            "ssh_config_s": round(statistics.median(config), 3),
            "ssh_through_proxy_s": round(statistics.median(
                [total - part for total, part in zip(samples[kind], config, strict=True)]), 3),
        }

    return [
        figure("ssh_connect_s", samples["cluster"], unit="s", baseline=samples["direct"],
               goal="<= 2 (absolute: ssh-config to the command's output)", digits=3,
               baseline_is=baseline_is, **split("cluster"),
               measures="podcode ssh-config POD -n NS, then ssh -F cfg -o BatchMode=yes "
                        "podcode-POD 'echo ...' through the API server's port-forward "
                        "(key pair already made)"),
        figure("ssh_connect_local_s", samples["local"], unit="s", baseline=samples["direct"],
               goal="<= 1 (absolute: ssh-config to the command's output)", digits=3,
               baseline_is=baseline_is, **split("local"),
               measures="podcode ssh-config (no pod: the session on this machine), then "
                        "ssh -F cfg -o BatchMode=yes podcode-local 'echo ...'"),
    ]


# -- idle cost --------------------------------------------------------------------------


def idle_pair(first_ssh: bool, seconds: float) -> dict[bool, tuple[float, float, int]]:
    """A session with SSH on and one with it off, measured over the same window:
    ``{ssh: (cpu s per minute, RSS in MB, processes)}``."""
    with tempfile.TemporaryDirectory(prefix="podcode-bench-ssh-idle-") as scratch, \
            ExitStack() as stack:
        root = Path(scratch)
        jobs: dict[bool, Job] = {}
        for ssh in (first_ssh, not first_ssh):
            name = "on" if ssh else "off"
            (root / name).mkdir()
            jobs[ssh] = Job(root / name, root / f"home-{name}")
            stack.callback(jobs[ssh].stop)
            jobs[ssh].write("job.py", JOB)
            jobs[ssh].start(env={"PODCODE_SSH": "1" if ssh else "0", "PODCODE_SSH_PORT": "0"})
        for ssh, job in jobs.items():
            record = job.wait_state("waiting", timeout=120)
            if bool(record.get("ssh")) != ssh:
                raise RuntimeError(f"the session with ssh={ssh} has ssh={record.get('ssh')!r} "
                                   "in its record")
        time.sleep(SETTLE_SECONDS)
        pids = {ssh: job.proc.pid for ssh, job in jobs.items() if job.proc is not None}
        before = {ssh: usage.cpu_seconds(usage.tree(pid)) for ssh, pid in pids.items()}
        started = time.monotonic()
        time.sleep(seconds)
        trees = {ssh: usage.tree(pid) for ssh, pid in pids.items()}
        after = {ssh: usage.cpu_seconds(tree) for ssh, tree in trees.items()}
        elapsed = time.monotonic() - started
        out: dict[bool, tuple[float, float, int]] = {}
        for ssh, tree in trees.items():
            if (jobs[ssh].session() or {}).get("state") != "waiting":
                raise RuntimeError(f"the session with ssh={ssh} stopped waiting during the "
                                   f"window:\n{jobs[ssh].output()[-2000:]}")
            used = sum(cpu - before[ssh].get(pid, 0.0) for pid, cpu in after[ssh].items())
            out[ssh] = (used * 60.0 / elapsed, usage.rss_bytes(tree) / 1e6, len(tree))
        return out


def idle_figures(runs: int = RUNS, seconds: float = IDLE_SECONDS) -> list[dict[str, Any]]:
    pairs = [idle_pair(index % 2 == 0, seconds) for index in range(runs)]
    cpu_on = [pair[True][0] for pair in pairs]
    cpu_off = [pair[False][0] for pair in pairs]
    rss_off = [pair[False][1] for pair in pairs]
    added = [pair[True][1] - pair[False][1] for pair in pairs]
    processes = max(pair[True][2] for pair in pairs)
    window = f"{seconds:g} s windows, both sessions measured over the same window"
    return [
        figure("ssh_idle_cpu_s_per_min", cpu_on, unit="cpu s/min", baseline=cpu_off,
               goal="<= 0.3 (absolute: 0.5% of a core)", digits=3,
               baseline_is="the same waiting session with PODCODE_SSH=0",
               added_median=round(statistics.median(
                   [on - off for on, off in zip(cpu_on, cpu_off, strict=True)]), 3),
               window=window, processes=processes),
        figure("ssh_rss_added_mb", added, unit="MB", baseline=rss_off, digits=1,
               goal="<= 20 (absolute)", baseline_unit="MB",
               baseline_is="the resident memory of the same waiting session with "
                           "PODCODE_SSH=0 (the figure is the difference, pair by pair)",
               window=window, processes=processes),
    ]


def run() -> list[dict[str, Any]]:
    client = _require_openssh()
    return connect_figures(client) + idle_figures()


if __name__ == "__main__":
    for entry in run():
        print(json.dumps(entry))
