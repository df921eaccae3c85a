"""Event loops while a resume plans: nothing the session serves waits for the plan.

``control_api_p99_ms_during_resume_plan``: a control API (the real server, its own
event loop thread) for a task whose workspace holds 20k files, in a process holding
2M objects; the engineer edited a nested function (so the plan scans the heap for its
live copies) and asks ``POST /api/resume``. While the resume plans, a client asks
``GET /api/status`` again and again; the figure is the 99th percentile of those
answers' latency. The baseline is the same requests while nothing plans, in the same
run.

``async_loop_stall_ms_during_resume``: a program awaits a failing ``@vscode``
coroutine beside a ticker coroutine that sleeps 1 ms at a time, in a process holding
2M objects, its workspace 20k files. Its session waits; the fix (a nested function
changed too) is written and ``POST /api/resume`` sent; the figure is the longest gap
between two ticks from the resume until the task's result, minus the 1 ms asked for.
No baseline: the goal is absolute. Each run also says the longest full garbage
collection meanwhile (``longest_full_gc_ms``): with 2M objects it pauses every thread,
the loop's too, whoever's allocation set it off.

Run: ``python benchmarks/run.py bench_loops``.
"""

from __future__ import annotations

import http.client
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import figure  # noqa: E402

RUNS = 3
FILES = 19_990
"""With the task's own files: the 20k a workspace snapshot watches at most."""
OBJECTS = 2_000_000
IDLE_REQUESTS = 300
MODULE = textwrap.dedent("""
    def outer():
        def inner(x):
            return x + %(inner)s
        return inner


    KEPT = outer()


    def task(values):
        return sum(KEPT(v) for v in values) // %(divisor)s
""")


def _workspace(root: Path, module: str) -> Path:
    """``root`` with 20k small files in folders of 500, and ``module``.py (not edited yet)."""
    for i in range(FILES):
        folder = root / f"pkg{i // 500}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"{i}\n")
    (root / f"{module}.py").write_text(MODULE % {"inner": 1, "divisor": 0})
    return root


def _edit(root: Path, module: str) -> None:
    (root / f"{module}.py").write_text(MODULE % {"inner": 2, "divisor": 1})


class _Controls:
    """What the control API asks of a session, planning as a session plans."""

    def __init__(self, base: Any, task: Any) -> None:
        from interactive.base.phases import RESUMABLE, Phase
        from interactive.base.state import SessionState
        from interactive.resume.plan import ArgShape

        self.state = SessionState("bench.task")
        self.state.move(Phase.WAITING)
        self._resumable, self._base, self._task = RESUMABLE, base, task
        self._shape = ArgShape(1, ())

    def resume(self, peer: bool = False) -> dict[str, Any]:
        from interactive.base.phases import Phase
        from interactive.resume.plan import plan_resume

        planned = plan_resume(self._base, self._task, self._shape)
        self.state.move(Phase.RESUMING, only_from=self._resumable)
        return planned.plan.report()

    def abort(self, peer: bool = False) -> None: ...

    def keepalive(self, seconds: float) -> float | None:
        return None

    def peer_status(self) -> dict[str, Any]:
        return {}


def _status_ms(connection: http.client.HTTPConnection, token: str) -> float:
    started = time.perf_counter()
    connection.request("GET", "/api/status", headers={"Authorization": f"Bearer {token}"})
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"status answered {response.status}")
    return (time.perf_counter() - started) * 1000


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98] if len(samples) > 1 else samples[0]


def control_p99(root: Path, run: int) -> tuple[float, float, int]:
    """(p99 ms of status while a resume plans, p99 ms while nothing plans, requests)."""
    from interactive.base.loop import LoopThread
    from interactive.base.ports import listen_socket
    from interactive.doors.control import ControlServer
    from interactive.storage.workspace import Snapshot

    name = f"bench_loops_mod{run}"
    _workspace(root, name)
    sys.path.insert(0, str(root))
    module = importlib.import_module(name)
    base = Snapshot.take(root)
    token = "bench"
    loop = LoopThread("bench-loops")
    server = ControlServer(_Controls(base, module.task), token, listen_socket("127.0.0.1", 0))
    loop.call(server.start())
    host, port = server.url.split("//", 1)[1].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        idle = [_status_ms(connection, token) for _ in range(IDLE_REQUESTS)]
        _edit(root, name)
        answered: list[int] = []

        def resume() -> None:
            request = urllib.request.Request(server.url + "/api/resume", b"", method="POST")
            request.add_header("Authorization", f"Bearer {token}")
            with urllib.request.urlopen(request, timeout=120) as response:
                answered.append(response.status)

        resuming = threading.Thread(target=resume)
        resuming.start()
        during = []
        while resuming.is_alive():
            during.append(_status_ms(connection, token))
        resuming.join()
        if answered != [202]:
            raise RuntimeError(f"the resume answered {answered}")
        return _p99(during), _p99(idle), len(during)
    finally:
        connection.close()
        loop.call(server.stop())
        loop.stop()
        sys.path.remove(str(root))


PROGRAM = textwrap.dedent("""
    import asyncio, gc, json, sys, time
    from pathlib import Path
    sys.path.insert(0, str(Path.cwd()))
    from interactive import vscode
    import heavy

    HEAP = [[] for _ in range(%(objects)d)]
    PAUSES, STARTED = [], []


    def collected(phase, info):  # the full collections of the heap: pauses of every thread
        if info["generation"] == 2:
            if phase == "start":
                STARTED.append(time.time())
            elif STARTED:
                PAUSES.append((STARTED[-1], time.time() - STARTED.pop()))


    gc.callbacks.append(collected)


    @vscode(ide="none", port=0, control_port=0, debug_port=0, workspace=str(Path.cwd()))
    async def broken(values):
        await asyncio.sleep(0)
        return heavy.task(values)


    async def ticker(ticks, stop):
        while not stop.is_set():
            await asyncio.sleep(0.001)
            ticks.append(time.time())


    async def main():
        stop, ticks = asyncio.Event(), []
        ticking = asyncio.create_task(ticker(ticks, stop))
        result = await broken(list(range(1000)))
        stop.set()
        await ticking
        Path("ticks.json").write_text(json.dumps(ticks))
        Path("pauses.json").write_text(json.dumps(PAUSES))
        print("RESULT", result, flush=True)


    asyncio.run(main())
""")


def _waiting(home: Path) -> dict[str, Any] | None:
    for path in (home / "sessions").glob("*/session.json"):
        try:
            found = json.loads(path.read_text())
        except ValueError:
            continue
        if found.get("state") == "waiting":
            return dict(found)
    return None


def loop_stall_ms(root: Path, home: Path) -> tuple[float, float]:
    """The longest tick gap of the program's loop from the resume to its result, and the
    longest full garbage collection meanwhile (ms): it pauses every thread."""
    _workspace(root, "heavy")
    (root / "job.py").write_text(PROGRAM % {"objects": OBJECTS})
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    child = subprocess.Popen([sys.executable, "job.py"], cwd=root, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while (record := _waiting(home)) is None:
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no session waited: {child.communicate()[0][-3000:]}")
            time.sleep(0.2)
        _edit(root, "heavy")
        asked = time.time()
        request = urllib.request.Request(record["control_url"] + "/api/resume", b"",
                                         method="POST")
        request.add_header("Authorization", f"Bearer {record['token']}")
        with urllib.request.urlopen(request, timeout=120) as response:
            if response.status != 202:
                raise RuntimeError(f"the resume answered {response.status}")
        output, _ = child.communicate(timeout=300)
        if "RESULT" not in output:
            raise RuntimeError(f"the resumed task gave no result: {output[-3000:]}")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    ticks = [t for t in json.loads((root / "ticks.json").read_text()) if t >= asked]
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    pauses = [d for t, d in json.loads((root / "pauses.json").read_text()) if t >= asked]
    return max(0.0, max(gaps) * 1000 - 1.0), max(pauses, default=0.0) * 1000


def run() -> list[dict[str, Any]]:
    heap = [[] for _ in range(OBJECTS)]  # the process holds 2M objects, as a real task's
    during, idle, counts = [], [], []
    try:
        for i in range(RUNS):
            with tempfile.TemporaryDirectory(prefix="bench-loops-") as folder:
                ours, theirs, count = control_p99(Path(folder), i)
            during.append(ours)
            idle.append(theirs)
            counts.append(count)
    finally:
        del heap
    stalls, collections = [], []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="bench-loops-") as folder, \
                tempfile.TemporaryDirectory(prefix="bench-loops-home-") as home:
            stall, collection = loop_stall_ms(Path(folder), Path(home))
            stalls.append(stall)
            collections.append(round(collection, 1))
    return [
        figure("control_api_p99_ms_during_resume_plan", during, unit="ms", goal="<= 50",
               baseline=idle, digits=2, requests_during_plan=counts),
        figure("async_loop_stall_ms_during_resume", stalls, unit="ms", goal="<= 50",
               digits=2, longest_full_gc_ms=collections),
    ]


if __name__ == "__main__":
    for entry in run():
        print(entry)
