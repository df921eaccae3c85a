"""Ray Train's ``torch_linear_example.py`` as a job on a real local cluster, for the tests
and the benchmark: a copy with a bug, the driver run as users run it (``python
torch_linear_example.py``), the workers' sessions read from their records, the fix made
in the session's workspace as the engineer would make it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.ray_cluster import Cluster
from tests.torchrun_job import with_bug
from tests.waiting import wait_until

EXAMPLE = Path(__file__).parent / "ray_examples" / "torch_linear_example.py"
ONE_RANK = (
    "return self.x[index, None], self.y[index, None]",
    "return self.x[index + 1, None], self.y[index + 1, None]",
)
"""Off by one: rank 1's shard ends at index 999, and 1000 is past the data (rank 0's ends
at 998): IndexError on rank 1 at its last batch, while rank 0 is in DDP's all-reduce."""
ALL_RANKS = ("result = dict(loss=loss)", "result = dict(loss=loss.item())")
"""``.item()`` on a float: AttributeError on both ranks after the first epoch."""
SETTINGS = {
    "PODCODE_IDE": "none", "PODCODE_PORT": "0", "PODCODE_CONTROL_PORT": "0",
    "PODCODE_DEBUG_PORT": "0", "PODCODE_POLL_SECONDS": "0.2",
    "PODCODE_MAX_IDLE_SECONDS": "3600",
}
PODCODE = str(Path(sys.executable).with_name("podcode"))


def project(folder: Path, bug: tuple[str, str] | None) -> Path:
    """The example in ``folder`` (made), with ``bug`` in it (None: as fixed)."""
    if bug is not None:
        return with_bug(folder, bug, EXAMPLE)
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(EXAMPLE, folder / EXAMPLE.name))


def result(output: str) -> dict[str, Any]:
    """The ``RESULT`` line the example prints: fit()'s metrics and the final weights."""
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, output[-4000:]
    found: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return found


def same_training(found: dict[str, Any], reference: dict[str, Any]) -> bool:
    """The same final loss and weights (the metrics Ray adds, times and folders, differ)."""
    return bool(found["metrics"]["loss"] == reference["metrics"]["loss"]
                and found["weights"] == reference["weights"])


class TrainJob:
    """The example's driver on ``cluster``, podcode on or off, its output in a file."""

    def __init__(self, cluster: Cluster, folder: Path, bug: tuple[str, str] | None,
                 enabled: bool = True, prepare: Callable[[Path], object] | None = None,
                 epochs: int | None = None) -> None:
        """``prepare(script)``: a last edit of the copy before it runs; ``epochs``: the
        example's ``--epochs`` (None: its default, 3)."""
        self.folder, self.home = folder, folder / "home"
        self.script = project(folder / "project", bug)
        if prepare is not None:
            prepare(self.script)
        self.log = folder / "driver.log"
        settings = {"PODCODE_ENABLE": "1" if enabled else "0", "PODCODE_HOME": str(self.home),
                    **(SETTINGS if enabled else {})}
        self.env = cluster.driver_env(**settings)
        self.env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
        self.started = time.monotonic()
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, EXAMPLE.name, "--storage-path", str(folder / "results"),
                 *(["--epochs", str(epochs)] if epochs is not None else [])],
                cwd=self.script.parent, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def records(self) -> list[dict[str, Any]]:
        """Every session record under the job's home (the workers' and the ranks')."""
        found = []
        for path in self.home.glob("**/session.json"):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return found

    def waiting(self, attempt: int = 0) -> list[dict[str, Any]]:
        """The sessions that wait now (at ``attempt`` or later), rank 0's first."""
        assert self.process.poll() is None, self.output()[-4000:]
        found = {record["pid"]: record for record in self.records()
                 if record.get("state") == "waiting" and record.get("control_url")
                 and (record.get("attempt") or 0) >= attempt}
        return sorted(found.values(), key=lambda record: (record.get("rank") or {}).get("rank", 0))

    def board_waiters(self) -> int:
        """How many workers said they wait on another's session for their bug."""
        return self.output().count("holds no session of its own")

    def in_sessions(self, sessions: int, board: int, timeout: float = 90) -> list[dict[str, Any]]:
        """Once ``sessions`` sessions wait and ``board`` workers wait on the board: the
        sessions."""
        return wait_until(
            lambda: (found := self.waiting()) and len(found) == sessions
            and self.board_waiters() >= board and found,
            f"{sessions} session(s) and {board} worker(s) waiting on the board", timeout, 0.2)

    def podcode(self, *args: str) -> str:
        env = {**self.env, "PODCODE_ENABLE": "0"}
        done = subprocess.run([PODCODE, *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def finish(self, timeout: float = 120) -> str:
        """The driver's output once it ends, successfully."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job never ended:\n{self.output()[-6000:]}") from None
        finally:
            self.stop()
        assert self.process.returncode == 0, self.output()[-6000:]
        return self.output()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)


class Reference:
    """The fixed example run with podcode off (``epochs`` as for :class:`TrainJob`), started
    at once, a job of its own that goes on beside what a test runs meanwhile: calling it
    waits for its result (the first time)."""

    def __init__(self, cluster: Cluster, folder: Path, epochs: int | None = None) -> None:
        self.job = TrainJob(cluster, folder, None, enabled=False, epochs=epochs)
        self.found: dict[str, Any] | None = None

    def __call__(self) -> dict[str, Any]:
        if self.found is None:
            self.found = result(self.job.finish(180))
        return self.found

    def stop(self) -> None:
        self.job.stop()
