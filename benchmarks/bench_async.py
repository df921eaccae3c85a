"""async def tasks and Flyte 2: the event loop while a session opens and waits, and a
Flyte 2 run from resume to result.

``async_loop_stall_ms``: a program gathers a failing ``@vscode`` coroutine with a
ticker coroutine that sleeps 10 ms at a time; the longest gap between two ticks,
from the failure until the session (with a real code-server) waits and then while
it waits for two seconds, minus the 10 ms asked for. The task fails a few seconds
after its first call, once the first call's warm-up is over (that warm-up, imports
on a thread, is not part of the figure). The baseline is the same
program with podcode disabled (the failure raised and caught, no session).

``flyte2_resume_to_result_s``: a Flyte 2 workflow (``flyte.run``, local mode) whose
async task fails; the task's file is fixed, then ``POST /api/resume``; seconds until
the run's result is printed.

Run: ``python benchmarks/bench_async.py`` (needs code-server, and ``flyte`` for the
second figure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_frame import waiting_session  # noqa: E402
from benchmarks.harness import figure, interleaved  # noqa: E402
from interactive.base.control_client import ControlClient  # noqa: E402
from interactive.base.identity import SESSION_VARIABLE  # noqa: E402
from server_bootstrap.config import CodeServerConfig  # noqa: E402
from server_bootstrap.locate import ensure_code_server  # noqa: E402

RUNS = 5
WAIT_SECONDS = 2.0
SETTLE_SECONDS = 3.0
"""Before the task fails: the warm-up of the first decorated call (imports on a thread,
which compete for the GIL) is over, as it is long before a real task fails."""
TICKER = textwrap.dedent("""
    import asyncio, json, sys, time
    from pathlib import Path
    from interactive import vscode


    FAILED = []


    @vscode(port=0, control_port=0, debug_port=0)
    async def broken() -> int:
        await asyncio.sleep(%(settle)s)  # the first call's warm-up imports are done
        FAILED.append(time.perf_counter())
        return 1 // int(Path("divisor").read_text())


    async def ticker(stop: asyncio.Event, gaps: list) -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            if FAILED and last >= FAILED[0]:
                gaps.append(now - last - 0.01)
            last = now


    async def main() -> None:
        stop, gaps = asyncio.Event(), []
        ticking = asyncio.create_task(ticker(stop, gaps))
        try:
            await broken()
        except ZeroDivisionError:
            await asyncio.sleep(%(wait)s)  # as long as a session is kept waiting below
        stop.set()
        await ticking
        Path("stall").write_text(json.dumps(max(gaps)))


    asyncio.run(main())
""") % {"wait": WAIT_SECONDS, "settle": SETTLE_SECONDS}
FLYTE = textwrap.dedent("""
    import asyncio, time
    import flyte
    from interactive import vscode

    env = flyte.TaskEnvironment(name="bench")


    @env.task
    @vscode(ide="none", port=0, control_port=0, debug_port=0)
    async def square(x: int) -> int:
        await asyncio.sleep(0)
        return x * x // (x - 2)


    @env.task
    async def main(n: int) -> list[int]:
        return list(await asyncio.gather(*(square(i) for i in range(n))))


    if __name__ == "__main__":
        flyte.init()
        outputs = flyte.run(main, n=3).outputs()
        print("DONE", time.time(), outputs, flush=True)
""")


def _environment(home: Path, enabled: bool, binary: Path | None) -> dict[str, str]:
    env = {**os.environ, "PODCODE_ENABLE": "1" if enabled else "0", "PODCODE_HOME": str(home),
           "PYTHONUNBUFFERED": "1"}
    if binary is not None:
        env["PODCODE_CODE_SERVER_PATH"] = str(binary)
    env.pop(SESSION_VARIABLE, None)
    return env


def stall_ms(enabled: bool, binary: Path | None) -> float:
    """The longest extra gap of the ticker in one run of the program, in ms."""
    with tempfile.TemporaryDirectory(prefix="podcode-bench-async-") as scratch:
        root = Path(scratch)
        (root / "job.py").write_text(TICKER)
        (root / "divisor").write_text("0")
        home = root / "home"
        proc = subprocess.Popen([sys.executable, "job.py"], cwd=root,
                                env=_environment(home, enabled, binary),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if enabled:
                record = waiting_session(home, proc)
                time.sleep(WAIT_SECONDS)
                (root / "divisor").write_text("1")
                ControlClient(record["control_url"], record["token"]).resume()
            if proc.wait(180) != 0:
                raise RuntimeError("the ticker program failed")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return float(json.loads((root / "stall").read_text())) * 1000


def flyte2_resume_seconds() -> float:
    with tempfile.TemporaryDirectory(prefix="podcode-bench-flyte2-") as scratch:
        root = Path(scratch)
        (root / "wf.py").write_text(FLYTE)
        home = root / "home"
        log = root / "out.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "wf.py"], cwd=root,
                                    env=_environment(home, True, None), stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            record = waiting_session(home, proc)
            (root / "wf.py").write_text(FLYTE.replace("x * x // (x - 2)", "x * x"))
            started = time.time()
            ControlClient(record["control_url"], record["token"]).resume()
            if proc.wait(180) != 0:
                raise RuntimeError(f"the Flyte 2 run failed:\n{log.read_text()}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        done = next(line for line in log.read_text().splitlines() if line.startswith("DONE"))
        return float(done.split()[1]) - started


def run() -> list[dict[str, Any]]:
    binary = ensure_code_server(CodeServerConfig.from_environ())
    ours, theirs = interleaved(lambda: stall_ms(True, binary), lambda: stall_ms(False, None),
                               runs=RUNS)
    entries = [figure("async_loop_stall_ms", ours, unit="ms", goal="< 50", baseline=theirs,
                      digits=1, baseline_unit="ms")]
    try:
        import flyte  # noqa: F401
    except ImportError:
        return entries
    samples = [flyte2_resume_seconds() for _ in range(RUNS)]
    entries.append(figure("flyte2_resume_to_result_s", samples, unit="s", goal="<= 2",
                          digits=3))
    return entries


if __name__ == "__main__":
    for entry in run():
        print(json.dumps(entry))
