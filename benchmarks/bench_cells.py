"""Notebook cells that cannot hurt the session, and the exit of a JupyterLab session.

- ``cell_print_peak_rss_mib``: a waiting session's process (``ide="none"``) runs one
  notebook cell that prints 500 MB (50 000 lines of 10 000 bytes) through
  ``POST /api/notebook/execute``; the figure is the rise of the process's peak resident
  memory (``VmHWM``) over its peak just before the cell, in MiB. A cell keeps the first
  :data:`~interactive.doors.notebook.outputs.MAX_PRINTED_BYTES` of its output and
  counts the rest, so the rise is bounded whatever the cell prints (it was about 900 MiB
  when a cell's output was held whole). Baseline: the process's peak before the cell
  (the session's own memory). Goal: at most 64 MiB over it.
- ``sigterm_exit_s_jupyterlab``: seconds from SIGTERM to a waiting session's process
  serving JupyterLab (``ide="jupyter"``, the server up and answering) until the process
  exited: JupyterLab's process tree is stopped (SIGTERM, then SIGKILL after
  :data:`~interactive.doors.notebook.jupyterlab.STOP_GRACE_SECONDS`) with the rest of
  the session. Baseline: the same with ``ide="none"``, interleaved. Goal: at most 0.5 s.

Run: ``python benchmarks/bench_cells.py``; ``python benchmarks/run.py --merge bench_cells``
keeps the other figures.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_frame import waiting_session  # noqa: E402
from benchmarks.harness import RUNS, figure, interleaved  # noqa: E402
from interactive.base.identity import SESSION_VARIABLE  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

PRINTED_LINES, LINE_BYTES = 50_000, 10_000
JOB = textwrap.dedent("""
    from interactive import vscode


    @vscode(port=0, control_port=0, debug_port=0, ide={ide!r})
    def train(value):
        rows = [value] * 3
        raise ValueError("broken")


    if __name__ == "__main__":
        train(1)
""")
PRINTER = f"for _ in range({PRINTED_LINES}):\n    print('x' * {LINE_BYTES - 1})\n'printed'"


def _environ(home: Path) -> dict[str, str]:
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    env.pop(SESSION_VARIABLE, None)
    return env


def _record(home: Path, proc: subprocess.Popen[bytes], ide: str) -> dict[str, Any]:
    """The session's record once it waits (and, with JupyterLab, once that answers)."""
    record = waiting_session(home, proc)
    if ide == "none":
        return record
    return dict(wait_until(lambda: _answering(home), "JupyterLab answers", 180))


def _answering(home: Path) -> dict[str, Any] | None:
    """The session's record, read again, once its JupyterLab answers (its address is
    written when it is up)."""
    record: dict[str, Any] = json.loads((home / "session.json").read_text())
    return record if _answers(record) else None


def _answers(record: dict[str, Any]) -> bool:
    url = record.get("code_server_url")
    if not url:
        return False
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api", timeout=2):  # noqa: S310
            return True
    except OSError:
        return False


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc: not Linux?")


class _Job:
    def __init__(self, ide: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="podcode-bench-cells-"))
        self.home, workspace = self.root / "home", self.root / "ws"
        workspace.mkdir()
        (workspace / "job.py").write_text(JOB.format(ide=ide))
        self.proc = subprocess.Popen([sys.executable, "job.py"], cwd=workspace,
                                     env=_environ(self.home), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.record = _record(self.home, self.proc, ide)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)


def print_peak() -> tuple[float, float]:
    """One run: the process's peak before the cell, and its rise, in MiB."""
    job = _Job("none")
    try:
        before = _peak_kib(job.proc.pid)
        request = urllib.request.Request(  # noqa: S310 - loopback http
            job.record["control_url"].rstrip("/") + "/api/notebook/execute",
            data=json.dumps({"code": PRINTER}).encode(), method="POST",
            headers={"Authorization": f"Bearer {job.record['token']}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:  # noqa: S310
            answer = json.loads(response.read())
        if not answer.get("ok") or "not kept" not in answer["outputs"][0]["text"]:
            raise RuntimeError(f"the cell did not end as expected: {str(answer)[-500:]}")
        return before / 1024, (_peak_kib(job.proc.pid) - before) / 1024
    finally:
        job.close()


def sigterm_exit(ide: str) -> float:
    """One run: seconds from SIGTERM to the exit of a waiting session's process."""
    job = _Job(ide)
    try:
        started = time.perf_counter()
        job.proc.send_signal(signal.SIGTERM)
        job.proc.wait(120)
        return time.perf_counter() - started
    finally:
        job.close()


def run(runs: int = RUNS) -> list[dict[str, Any]]:
    peaks = [print_peak() for _ in range(runs)]
    jupyter, bare = interleaved(lambda: sigterm_exit("jupyter"), lambda: sigterm_exit("none"),
                                runs)
    return [
        figure("cell_print_peak_rss_mib", [rise for _, rise in peaks], unit="MiB",
               goal="<= 64", baseline=[before for before, _ in peaks], digits=1,
               measures="rise of the task process's peak RSS while a cell prints 500 MB",
               baseline_is="the process's peak RSS just before the cell (MiB)"),
        figure("sigterm_exit_s_jupyterlab", jupyter, unit="s", goal="<= 0.5", baseline=bare,
               digits=3, measures="seconds from SIGTERM to the exit of a waiting session's "
               "process that serves JupyterLab",
               baseline_is="the same with ide=\"none\" (no IDE), interleaved"),
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
