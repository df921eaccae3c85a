"""Benchmark of the job-wide channel (``interactive.distributed.jobstore``) on one torch
``TCPStore``, the job's rendezvous store, hosted by a process of its own as a torchrun
agent would host it. The pods are light: each is two clients of that store in this
process (its channel, and the client its waiting thread holds), not a torch job.

``run()`` returns entries with the median, ``min`` and ``max`` of ``PODCODE_BENCH_RUNS``
runs (default 5):

- ``multipod_fix_fanout_s``: wall seconds from one pod starting to post a fix (4 files,
  100 KB, chunked and signed) to the last of **32** waiting pods having read and
  verified it (each waits on the manifest's key with ``wait``: no polling). Baseline,
  measured in the same run: the same bytes as one plain value (no chunks, no
  signature), waited for and read the same way. Goal: at most 5 s.
- ``multipod_store_idle_cpu_s_per_min_{8,32,128}``: CPU seconds per minute of the
  process hosting the store while 8, 32 or 128 pods wait in the job's session as pods
  do (``interactive.distributed.jobsession``): pod 0 serves the session, and each
  pod's ``jobbeats.Beats`` runs as in a pod's leading rank of a job of that many pods
  (one beat every ``jobstore.BEAT_SECONDS``, 4 s, for the serving pod, and every
  ``jobbeats.spacing(pods)`` for the others: 4 s up to 64 pods, 8 s at 128; after
  each of its beats the serving pod reads every pod's counter, ``beats()``, and the
  first two other pods, the wardens, read the serving pod's, ``beat_count``);
  each pod also holds one blocked ``wait`` through ``JobSession.next_command`` (the
  serving pod on ``request/<generation>``, the others on ``command/<generation>``),
  ended by an ``end`` command after the window. CPU time is the sum over the host's
  threads of ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds; ``psutil``'s clock
  ticks are too coarse for a 16-second window), else ``psutil``. Baseline, measured
  in the same run: the same connections held, nothing waited for and no beat. Goal at
  128 pods: at most 0.05; none at 8 and 32.

The job-wide figures with real torchrun agents (a failure to every rank's session,
one resume to the job's result) are in ``bench_multipod_job``.

Run: ``python benchmarks/run.py --merge bench_multipod`` (needs torch).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RUNS, figure, interleaved  # noqa: E402
from interactive.distributed import jobstore  # noqa: E402
from interactive.distributed.jobbeats import Beats  # noqa: E402
from interactive.distributed.jobfix import FileEdit  # noqa: E402
from interactive.distributed.jobsession import END, JobCommand, JobSession  # noqa: E402
from interactive.distributed.jobstore import Bug, JobStore, StoreAddress  # noqa: E402

FANOUT_PODS = 32
IDLE_PODS = (8, 32, 128)
WINDOW_SECONDS = 4 * jobstore.BEAT_SECONDS
"""How long the store host's CPU is measured for one sample: whole beats, so every
pod beats as often in every window."""
FILES = 4
FILE_BYTES = 25_000
WAIT = datetime.timedelta(minutes=5)
SECRET = os.urandom(32)


def serve() -> None:
    """The store host: a ``TCPStore`` server until stdin closes."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=30))
    print(store.port, flush=True)
    sys.stdin.read()


@contextmanager
def store_host() -> Iterator[tuple[int, int]]:
    """The host's pid and the store's port."""
    with subprocess.Popen([sys.executable, __file__, "serve"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as host:
        assert host.stdout is not None and host.stdin is not None
        try:
            yield host.pid, int(host.stdout.readline())
        finally:
            host.stdin.close()
            host.kill()


def cpu_seconds(pid: int) -> float:
    """CPU seconds the process ``pid`` has used, every thread of it."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        import psutil

        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)


def pods(port: int, count: int, namespace: str) -> list[JobStore]:
    where = StoreAddress("127.0.0.1", port)

    def one(index: int) -> JobStore:
        return JobStore(jobstore.connect(where), namespace, f"pod-{index}", where,
                        waiter=jobstore.connect(where))

    return [one(index) for index in range(count)]


def start(targets: list[Any]) -> list[threading.Thread]:
    threads = [threading.Thread(target=target, daemon=True) for target in targets]
    for thread in threads:
        thread.start()
    return threads


def join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(300)
        if thread.is_alive():
            raise RuntimeError("a pod did not finish")


def fix() -> list[FileEdit]:
    return [FileEdit(f"pkg/module_{i}.py", os.urandom(FILE_BYTES), "0" * 64)
            for i in range(FILES)]


class Fanout:
    """One fix posted to ``pods[1:]``, waiting; each sample a generation of its own."""

    def __init__(self, channels: list[JobStore]) -> None:
        self.channels = channels
        self.generation = 0

    def _next(self) -> int:
        self.generation += 1
        return self.generation

    def ours(self) -> float:
        generation, done = self._next(), []
        threads = start([lambda p=p: done.append((p.wait_fix(generation, SECRET, WAIT),
                                                  time.perf_counter()))
                         for p in self.channels[1:]])
        time.sleep(0.5)  # every pod waits in the store
        started = time.perf_counter()
        self.channels[0].post_fix(generation, fix(), SECRET)
        join(threads)
        if len(done) != len(threads) or any(got is None for got, _ in done):
            raise RuntimeError("a pod did not get the fix")
        return max(at for _, at in done) - started

    def baseline(self) -> float:
        key, done = self.channels[0].key("plain", self._next()), []

        def wait(p: JobStore) -> None:
            p.waiter.wait([key], WAIT)
            done.append((p.client.get(key), time.perf_counter()))

        threads = start([lambda p=p: wait(p) for p in self.channels[1:]])
        time.sleep(0.5)
        started = time.perf_counter()
        self.channels[0].client.set(key, b"".join(edit.content for edit in fix()))
        join(threads)
        return max(at for _, at in done) - started


class Idle:
    """The store host's CPU while ``channels`` wait in a session and beat, or only hold
    on. ``channels[0]`` serves the session."""

    def __init__(self, pid: int, channels: list[JobStore]) -> None:
        self.pid = pid
        self.channels = channels
        self.generation = 1000

    def _window(self) -> float:
        before = cpu_seconds(self.pid)
        time.sleep(WINDOW_SECONDS)
        return (cpu_seconds(self.pid) - before) * 60 / WINDOW_SECONDS

    def ours(self) -> float:
        self.generation += 1
        serving = self.channels[0].pod
        bug = Bug(2, serving, "IndexError", "list index out of range")
        jobs = [JobSession(p, self.generation, bug, serving) for p in self.channels]
        lost: list[str] = []
        pods = [Beats(p) for p in self.channels]
        for job, beat in zip(jobs, pods, strict=True):
            beat.watch(job, lost.append, len(self.channels))  # a job of that many pods
        stop = threading.Event()
        commands: list[JobCommand | None] = []
        waiting = start([lambda job=job: commands.append(job.next_command()) for job in jobs])
        beating = start([lambda beat=beat: beat.run(stop) for beat in pods])
        time.sleep(jobstore.BEAT_SECONDS)  # past the first beats
        try:
            return self._window()
        finally:
            stop.set()
            jobs[0].post(END, why="the benchmark's window is over")  # wakes every waiter
            join(waiting + beating)
            if lost:
                raise RuntimeError(f"a pod counted another lost while idle: {lost[0]}")
            if len(commands) != len(jobs) or any(c is None or c.kind != END for c in commands):
                raise RuntimeError(f"a pod's wait did not end with the command: {commands}")

    def baseline(self) -> float:
        return self._window()


def run(runs: int = RUNS) -> list[dict[str, Any]]:
    entries = []
    with store_host() as (pid, port):
        fanout = Fanout(pods(port, FANOUT_PODS + 1, "bench/fanout"))  # one posts
        mine, theirs = interleaved(fanout.ours, fanout.baseline, runs)
        entries.append(figure(
            "multipod_fix_fanout_s", mine, unit="s", baseline=theirs, goal="<= 5.0",
            pods=FANOUT_PODS, fix_bytes=FILES * FILE_BYTES,
            baseline_is="the same bytes as one plain value, waited for and read",
        ))
        for count in IDLE_PODS:
            idle = Idle(pid, pods(port, count, f"bench/{count}"))
            mine, theirs = interleaved(idle.ours, idle.baseline, runs)
            entries.append(figure(
                f"multipod_store_idle_cpu_s_per_min_{count}", mine, unit="cpu-s/min",
                baseline=theirs, digits=4,
                goal="<= 0.05" if count == 128 else "none (0.05 at 128 pods)",
                beat_seconds=jobstore.BEAT_SECONDS, window_seconds=WINDOW_SECONDS,
                baseline_is="the same connections held, no wait and no beat",
                measures=f"CPU of the job's store host while {count} pods wait in the job's "
                "session: each beats (every 4 s; 8 s at 128 pods but the serving one), the "
                "serving pod reads every counter, two others the serving pod's, and each "
                "holds one blocked wait for a command",
            ))
    return entries


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        for entry in run():
            print(entry)
