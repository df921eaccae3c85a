"""Benchmarks of the idle monitor: what watching costs, and how fast cleanup follows the deadline.

``run()`` returns entries ``{"name", "value", "unit", "baseline", "goal"}`` with the
median, ``min`` and ``max`` of several runs (:mod:`benchmarks.harness`):

- ``monitor_cpu_fraction``: CPU seconds this process spends per wall second
  while the monitor watches an idle session with its real samplers (workspace
  files, CPU of this user's processes, NVML) at the default ``poll_seconds=10``,
  over 60 s (``PODCODE_BENCH_MONITOR_SECONDS``) cut into 3 windows, one sample each.
  The workspace has 2,000 source files plus a 5,000-file ``.git`` folder.
  Baseline, measured in the same run: the same polls if each one re-read the
  workspace as a full :class:`~interactive.storage.workspace.Snapshot` (stamps and text)
  instead of the samplers' stat-only scan. Goal: at most 0.005 (0.5 % of one core).
- ``reap_latency_s``: seconds from the cleanup deadline (``reap_at``) to the
  pod's DELETE request, with ``poll_seconds=0.5``, real samplers, the real
  cleanup (edits saved to a local store, final email to a local SMTP server
  when aiosmtpd is installed) and the real Kubernetes client against the
  in-process fake API server of the tests (a recording fake pod without it).
  Baseline, measured in the same run and interleaved: a bare loop that looks at
  the clock every ``poll_seconds`` and then sends the same DELETE through the same
  client, with no cleanup; a real deadline falls anywhere between two polls, so the
  runs put it at evenly spread points of the poll interval. Goal: at most 1.0 s.

Run: ``python benchmarks/bench_monitor.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RUNS, figure  # noqa: E402
from interactive.base.settings import IdleSettings, build_settings  # noqa: E402
from interactive.base.smtp import parse_smtp_url  # noqa: E402
from interactive.base.state import SessionState  # noqa: E402
from interactive.reaper.activity import (  # noqa: E402
    OWN_THREAD_PREFIXES,
    CpuSampler,
    FileSampler,
    GpuSampler,
)
from interactive.reaper.cleanup import cleanup  # noqa: E402
from interactive.reaper.monitor import MonitorDeps, run_monitor  # noqa: E402
from interactive.reaper.notify import EmailNotifier, Notifier  # noqa: E402
from interactive.storage.backends import open_store  # noqa: E402
from interactive.storage.workspace import Snapshot  # noqa: E402

WATCH_SECONDS = float(os.environ.get("PODCODE_BENCH_MONITOR_SECONDS", "60"))
WATCH_WINDOWS = 3


def make_workspace(root: Path, files: int = 2000, git_files: int = 5000) -> Path:
    for index in range(files):
        folder = root / f"pkg{index // 50}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{index}.py").write_text(f"VALUE = {index}\n" * 40)
    for index in range(git_files):
        folder = root / ".git" / "objects" / f"{index % 256:02x}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"obj{index}").write_bytes(b"x" * 200)
    return root


STAND_INS = ("bench-", "fake-kube")
"""Threads of the in-process SMTP and API servers: remote services in a real deployment."""


def samplers(workspace: Path, idle: IdleSettings, scope: str = "user") -> list[Any]:
    """The real samplers; ``user`` scope looks at every process of this user, as in a pod."""
    prefixes = (*OWN_THREAD_PREFIXES, *STAND_INS)
    return [
        FileSampler(workspace),
        CpuSampler(idle.cpu_idle_percent, scope=scope, own_thread_prefixes=prefixes),
        GpuSampler(idle.gpu_idle_percent),
    ]


# -- monitor_cpu_fraction --------------------------------------------------------------


async def watch(workspace: Path, seconds: float, windows: int = WATCH_WINDOWS) -> list[float]:
    """CPU seconds per wall second of this process while the monitor watches, one sample
    per window of ``seconds / windows``."""
    settings = build_settings({"max_idle_seconds": 10 * seconds, "poll_seconds": 10}, {}).idle
    state = SessionState("bench.idle")
    state.set(state="waiting")
    deps = MonitorDeps(samplers(workspace, settings), time.time, asyncio.sleep, None, None)

    async def never() -> None:
        raise AssertionError("an idle session must not be reaped within the benchmark")

    task = asyncio.create_task(run_monitor(state, settings, deps, on_reap=never))
    await asyncio.sleep(0.5)  # the first (baseline) samples
    fractions = []
    for _ in range(windows):
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds / windows)
        fractions.append((time.process_time() - cpu) / (time.perf_counter() - wall))
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return fractions


def snapshot_fraction(
    workspace: Path, poll_seconds: float = 10.0, repeats: int = WATCH_WINDOWS
) -> list[float]:
    """CPU per wall second if every poll took a full Snapshot of the workspace."""
    fractions = []
    for _ in range(repeats):
        started = time.process_time()
        Snapshot.take(workspace)
        fractions.append((time.process_time() - started) / poll_seconds)
    return fractions


# -- reap_latency_s --------------------------------------------------------------------


@contextlib.contextmanager
def pod_client(folder: Path) -> Iterator[tuple[Any, list[float], Callable[[], object]]]:
    """The real PodClient against the tests' fake API server, or a recording fake."""
    deletes: list[float] = []
    try:
        from interactive.kube.pod import PodClient
        from tests.fake_kube import FakeKube
    except ImportError:

        class RecordingPod:
            name, namespace = "bench", "default"

            def set_state(self, state: str) -> None: ...
            def set_reap_at(self, when: float | None) -> None: ...
            def set_idle_since(self, when: float | None) -> None: ...
            def event(self, reason: str, message: str, type: str = "Normal") -> None: ...
            def owner_annotation(self) -> str | None:
                return None

            def delete(self) -> bool:
                deletes.append(time.time())
                return True

        yield RecordingPod(), deletes, lambda: None
        return

    class TimedPod(PodClient):
        def delete(self, grace_seconds: int | None = None) -> bool:
            deletes.append(time.time())
            return super().delete(grace_seconds)

    kube = FakeKube(folder).start()
    try:
        environ = {"POD_NAME": "bench", "POD_NAMESPACE": "default",
                   "KUBECONFIG": str(kube.kubeconfig)}
        pod = TimedPod.discover(environ)
        assert pod is not None
        try:
            yield pod, deletes, lambda: kube.add_pod("bench", "default")
        finally:
            pod.close()
    finally:
        kube.stop()


@contextlib.contextmanager
def smtp_notifier() -> Iterator[Notifier | None]:
    try:
        from tests.smtp_fixture import start_server
    except ImportError:
        yield None
        return
    before = set(threading.enumerate())
    server, controller = start_server()
    for thread in set(threading.enumerate()) - before:
        thread.name = f"bench-smtp-{thread.name}"
    try:
        yield EmailNotifier(parse_smtp_url(server.url), "podcode@bench", "owner@example.com")
    finally:
        controller.stop()


async def reap_once(workspace: Path, store_dir: Path, pod: Any, notifier: Notifier | None,
                    deletes: list[float]) -> float:
    settings = build_settings({"max_idle_seconds": 1, "grace_seconds": 1, "poll_seconds": 0.5}, {})
    state = SessionState("bench.reap")
    state.set(state="waiting")
    snapshot = Snapshot.take(workspace)
    (workspace / "pkg0" / "mod0.py").write_text("VALUE = 'edited'\n")
    store = open_store({"PODCODE_STORE": str(store_dir)})
    # On a shared machine other users' work would keep the session busy: watch our own tree.
    deps = MonitorDeps(samplers(workspace, settings.idle, scope="tree"), time.time, asyncio.sleep,
                       notifier, pod)
    deadlines: list[float] = []

    async def on_reap() -> None:
        assert state.reap_at is not None
        deadlines.append(state.reap_at)
        await cleanup(state=state, hooks=settings.hooks, snapshot=snapshot, store=store, ide=None,
                      pod=pod, notifier=notifier, clock=time.time)

    count = len(deletes)
    await asyncio.wait_for(run_monitor(state, settings.idle, deps, on_reap=on_reap), 60)
    assert len(deletes) == count + 1, "the pod was not deleted"
    return deletes[-1] - deadlines[0]


async def bare_reap_once(pod: Any, deletes: list[float], phase: float,
                         poll_seconds: float = 0.5) -> float:
    """A loop that only looks at the clock every poll, then deletes the pod: seconds from
    its deadline (``phase`` of a poll interval after its second poll) to the DELETE."""
    deadline = time.time() + (2 + phase) * poll_seconds
    while time.time() < deadline:
        await asyncio.sleep(poll_seconds)
    count = len(deletes)
    await asyncio.to_thread(pod.delete)
    assert len(deletes) == count + 1, "the pod was not deleted"
    return deletes[-1] - deadline


async def reap_latency(root: Path, runs: int = RUNS) -> tuple[list[float], list[float]]:
    """(podcode's latencies, the bare loop's), interleaved."""
    workspace = make_workspace(root / "reap-ws", files=200, git_files=0)
    ours: list[float] = []
    bare: list[float] = []
    with pod_client(root) as (pod, deletes, add_pod), smtp_notifier() as notifier:
        for run in range(runs):
            add_pod()
            ours.append(await reap_once(workspace, root / f"store{run}", pod, notifier, deletes))
            add_pod()
            bare.append(await bare_reap_once(pod, deletes, (run + 0.5) / runs))
    return ours, bare


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="podcode-bench-") as folder:
        root = Path(folder)
        workspace = make_workspace(root / "ws")
        fractions = asyncio.run(watch(workspace, WATCH_SECONDS))
        naive = snapshot_fraction(workspace)
        latency, bare = asyncio.run(reap_latency(root))
    return [
        figure("monitor_cpu_fraction", fractions, unit="cpu s / wall s", baseline=naive,
               goal="<= 0.005", digits=6),
        figure("reap_latency_s", latency, unit="s", baseline=bare, goal="<= 1.0", digits=3,
               baseline_is="a bare loop that looks every 0.5 s, then the same DELETE"),
    ]


def main() -> None:
    print(json.dumps(run(), indent=2))


if __name__ == "__main__":
    main()
