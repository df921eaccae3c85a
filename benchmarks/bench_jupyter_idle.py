"""JupyterLab (``ide="jupyter"``) with a browser tab open and nobody at it.

``run()`` returns the median over the rounds (an entry ``{"name", "value", "unit",
"baseline", "goal"}`` with ``min`` and ``max``):

- ``jupyterlab_idle_tab_cpu_percent``: the CPU, in percent of one core, that JupyterLab's
  process tree (its server and the session's kernel) uses over :data:`MEASURE_S` seconds
  while Chromium shows the starter notebook, logged in, and nobody touches it (after
  :data:`SETTLE_S` seconds to settle). The idle monitor counts JupyterLab's whole tree
  as the user's (its kernels and terminals run the user's work): this is what an
  untouched tab adds to it. Baseline: the monitor's threshold, ``cpu_idle_percent``
  (5 by default). Goal: at most 1 (a fifth of it).

Run: ``python benchmarks/bench_jupyter_idle.py`` (needs JupyterLab, Debian's chromium
and playwright); ``python benchmarks/run.py --merge bench_jupyter_idle`` keeps the other
figures.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_frame import (  # noqa: E402
    TIMEOUT_MS,
    VIEWPORT,
    _stop,
    in_rounds,
    start_job,
    waiting_session,
)
from interactive.base.settings import IdleSettings  # noqa: E402

ROUNDS = 3
SETTLE_S = 20.0
MEASURE_S = 60.0


def _tree_cpu(root: psutil.Process) -> float:
    """CPU seconds used so far by the JupyterLab server under ``root`` and its tree."""
    total = 0.0
    for proc in root.children(recursive=True):
        try:
            if "jupyterlab" not in proc.cmdline():
                continue
            for member in (proc, *proc.children(recursive=True)):
                times = member.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def idle_tab(root: Path, browser: Any) -> float:
    """Percent of one core JupyterLab's tree uses while its tab is open and untouched."""
    workspace, home = root / "ws", root / "home"
    proc = start_job(workspace, home, {"PODCODE_IDE": "jupyter"})
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        record = waiting_session(home, proc)
        page.goto(record["code_server_url"])
        page.fill("input[type=password]", record["password"])
        page.keyboard.press("Enter")
        page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for()
        time.sleep(SETTLE_S)
        job = psutil.Process(proc.pid)
        before, started = _tree_cpu(job), time.monotonic()
        time.sleep(MEASURE_S)
        return 100.0 * (_tree_cpu(job) - before) / (time.monotonic() - started)
    finally:
        context.close()
        _stop(proc)


def run(rounds: int = ROUNDS) -> list[dict[str, Any]]:
    values: list[float] = []
    in_rounds(rounds, "podcode-bench-jupyter-", lambda root, browser: values.append(
        idle_tab(root, browser)))
    threshold = IdleSettings().cpu_idle_percent
    return [{"name": "jupyterlab_idle_tab_cpu_percent",
             "value": round(statistics.median(values), 3), "unit": "%",
             "baseline": threshold, "goal": "<= 1", "min": round(min(values), 3),
             "max": round(max(values), 3)}]


if __name__ == "__main__":
    for entry in run():
        print(entry)
