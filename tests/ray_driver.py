"""Driver scripts on a real local Ray cluster, run as users run them, shared by the Ray
tests: the driver, podcode's settings in its programs, what a driver said."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.ray_cluster import Cluster
from tests.waiting import wait_until

PODCODE = str(Path(sys.executable).with_name("podcode"))
SETTINGS = 'dict(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)'


class Driver:
    """A driver script run as users run it (``python driver.py``), its output in a file."""

    def __init__(
        self, cluster: Cluster, folder: Path, files: dict[str, str], submit: str | None = None,
        **more: str,
    ) -> None:
        """``submit``: the job's submission id, to run it with ``ray job submit``."""
        self.project, self.home = folder / "project", folder / "home"
        self.project.mkdir()
        for name, text in files.items():
            (self.project / name).write_text(text)
        self.log = folder / "driver.log"
        settings = {"PODCODE_ENABLE": "1", "PODCODE_HOME": str(self.home), **more}
        command = [sys.executable, "driver.py"]
        if submit:  # the settings go in the job's runtime environment, as users pass them
            assert cluster.dashboard is not None
            runtime_env = {"working_dir": ".", "env_vars": settings}
            command = [str(Path(sys.executable).with_name("ray")), "job", "submit",
                       "--address", cluster.dashboard, "--submission-id", submit,
                       "--runtime-env-json",
                       json.dumps(runtime_env), "--", sys.executable, "driver.py"]
            settings = {}
        self.env = cluster.driver_env(**settings)
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                command, cwd=self.project, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )

    def session(self, timeout: float = 120) -> dict[str, Any]:
        """The one waiting session (the driver's output, if it ends first)."""

        def opened() -> list[dict[str, Any]]:
            assert self.process.poll() is None, self.output()[-3000:]
            return self.records("waiting")

        (record,) = wait_until(opened, "the session", timeout, 0.2)
        return record

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def records(self, state: str | None = None) -> list[dict[str, Any]]:
        found = []
        for path in (self.home / "sessions").glob("*/session.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if state is None or record.get("state") == state:
                found.append(record)
        return found

    def podcode(self, *args: str) -> str:
        env = {**self.env, "PODCODE_ENABLE": "0", "PODCODE_HOME": str(self.home)}
        done = subprocess.run([PODCODE, *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def fix(self, old: str, new: str) -> tuple[Path, str]:
        """Once the session waits, edit its ``driver.py`` (``old`` to ``new``) and resume:
        the session's workspace, and what ``podcode resume`` said."""
        workspace = Path(self.session()["workspace"])
        script = workspace / "driver.py"
        assert script.is_file(), workspace
        script.write_text(script.read_text().replace(old, new))
        return workspace, self.podcode("resume")

    def edits(self, task: str) -> str:
        """``podcode edits TASK``: the saved patch, or "" while there is none."""
        done = subprocess.run([PODCODE, "edits", task], capture_output=True, text=True,
                              timeout=60, check=False,
                              env={**self.env, "PODCODE_HOME": str(self.home)})
        return done.stdout if done.returncode == 0 else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)

    def finish(self) -> str:
        try:
            self.process.wait(120)
        finally:
            self.stop()
        assert self.process.returncode == 0, self.output()[-3000:]
        return self.output()


TUNE_STOPPED = f"""\
import json
import os
import tempfile
import time

import ray
from ray import tune
from interactive import vscode

SETTINGS = {SETTINGS}


def evaluation_fn(step, width, height):
    time.sleep(0.01)
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


@vscode(**SETTINGS)
def train_func(config):
    step = 0
    width, height = config["width"], config["hieght"]

    checkpoint = tune.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            with open(os.path.join(checkpoint_dir, "checkpoint.json")) as f:
                state = json.load(f)
                step = state["step"] + 1

    for step in range(step, 100):
        intermediate_score = evaluation_fn(step, width, height)
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            with open(os.path.join(temp_checkpoint_dir, "checkpoint.json"), "w") as f:
                json.dump({{"step": step}}, f)
            tune.report(
                {{"iterations": step, "mean_loss": intermediate_score}},
                checkpoint=tune.Checkpoint.from_directory(temp_checkpoint_dir),
            )


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    tuner = tune.Tuner(
        train_func,
        run_config=tune.RunConfig(name="exp", storage_path=os.path.abspath("../results"),
                                  stop={{"training_iteration": 10}}),
        tune_config=tune.TuneConfig(metric="mean_loss", mode="min"),
        param_space={{"width": tune.grid_search([10, 20]),
                      "height": tune.grid_search([0, -50])}},
    )
    results = tuner.fit()
    print("ERRORS", results.num_errors, flush=True)
    for result in sorted(results, key=lambda r: (r.config["width"], r.config["height"])):
        print("TRIAL", result.config["width"], result.config["height"],
              "LOSS", round(result.metrics["mean_loss"], 9),
              "ITERATION", result.metrics["training_iteration"], flush=True)
"""
"""Tune's custom_func_checkpointing example as published (a function trainable that
checkpoints every step, ``stop={"training_iteration": 10}``), its random search replaced by
a 2x2 grid, with a misspelt config key that every trial hits."""


def waiting(driver: Driver, count: int, what: str) -> None:
    """Until ``count`` tasks said they wait on a session (the driver's output if not; its
    workers' lines counted only with ``RAY_DEDUP_LOGS=0``: Ray folds lines that differ in
    numbers only)."""
    try:
        wait_until(lambda: driver.output().count("waits for its outcome") >= count, what, 120,
                   0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{driver.output()[-6000:]}") from None


RAY_LINE = re.compile(r"\x1b\[\d+m\(|\(\S+ pid=\d+")
"""Where a line that Ray's log forwarding wrote into the middle of the driver's begins (an
unbuffered ``print`` writes its text and its newline apart)."""


RAY_TEXT = re.compile(rf"(?:{RAY_LINE.pattern})(?:(?!TRIAL |ERRORS )[^\n])*\n?")
"""What Ray's log forwarding wrote: from its prefix to its newline, or to the driver's own
line that was written between its text and its newline."""


def trials(output: str) -> list[str]:
    """The driver's TRIAL and ERRORS lines, whole again where Ray's forwarded lines came
    between the parts a ``print`` writes (its arguments, their separators, its newline)."""
    own = RAY_TEXT.sub("", output)
    return [line.rstrip() for line in own.splitlines() if line.startswith(("TRIAL", "ERRORS"))]
