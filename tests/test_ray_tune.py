"""Ray Tune's own fault tolerance, class trainables and schedulers under podcode, on a real
local cluster (``ray start``, no PODCODE_* in its environment). Each program is one of
Tune's published examples adapted as little as possible, also run with podcode off (the
fixed program where there is a fix), a job of its own beside the test's: the experiment's
results must be the same."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.ray_cluster import Cluster, ray_cluster
from tests.ray_driver import SETTINGS, TUNE_STOPPED, Driver, trials, waiting

pytest.importorskip("ray.tune")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Room for two experiments of four trials at once: a test's run with podcode off goes
    on beside its run with podcode on."""
    with ray_cluster(cpus=8, prestart=False) as running:
        yield running


@contextmanager
def without_podcode(cluster: Cluster, folder: Path, text: str, **env: str) -> Iterator[Driver]:
    """The program ``text`` run with podcode off, a job of its own started at once, beside
    what the test runs with podcode on: its output is what its ``finish()`` returns."""
    folder.mkdir()
    driver = Driver(cluster, folder, {"driver.py": own_experiment(text)}, PODCODE_ENABLE="0",
                    **env)
    try:
        yield driver
    finally:
        driver.stop()


EXPERIMENT = re.compile(r'RunConfig\(name="(\w+)"')


def own_experiment(text: str) -> str:
    """``text`` with its experiment renamed: Tune stages a driver's files under the
    cluster's ``artifacts/<second it started>/<experiment>``, so two drivers of one name
    that start in the same second share them (and one restores the other's state)."""
    for name in set(EXPERIMENT.findall(text)):  # none in a program without Tune
        text = text.replace(f'"{name}"', f'"{name}_off"')
    return text


def assert_one_session_one_fix(output: str, expected: list[str], taken: int) -> None:
    """One session opened, ``taken`` other tasks ran the fix it posted, and the trials'
    results are ``expected`` (the fixed program's)."""
    assert output.count("opening a debug session") == 1, "one bug, one session"
    assert output.count("fixed in its session; this task runs again") == taken, output[-3000:]
    assert trials(output) == expected, output[-3000:]


def fixed_in_session(cluster: Cluster, folder: Path, text: str, edit: tuple[str, str],
                     waiters: int = 0, **env: str) -> tuple[str, str]:
    """The program ``text`` run with podcode: once its one session is open and ``waiters``
    other tasks wait on it, the session's copy is edited (``edit``: old, new) and the
    session resumed. What ``podcode resume`` said, and the program's output."""
    folder.mkdir()
    driver = Driver(cluster, folder, {"driver.py": text}, RAY_DEDUP_LOGS="0", **env)
    try:
        driver.session()
        if waiters:
            waiting(driver, waiters, f"{waiters} other task(s) waiting on the one session")
        _, resumed = driver.fix(*edit)
        return resumed, driver.finish()
    finally:
        driver.stop()


RETRIED = TUNE_STOPPED.replace('config["hieght"]', 'config["height"]').replace(
    "    for step in range(step, 100):\n",
    "    for step in range(step, 100):\n"
    "        if step == 5 and (width == 20 or not checkpoint):\n"
    '            raise RuntimeError(f"the node went away at step {step}")\n',
).replace(
    '                                  stop={"training_iteration": 10}),\n',
    '                                  stop={"training_iteration": 10},\n'
    "                                  failure_config=tune.FailureConfig(max_failures=1)),\n",
).replace(
    '              "ITERATION", result.metrics["training_iteration"], flush=True)\n',
    '              "ITERATION", result.metrics["training_iteration"],\n'
    '              "ERROR", type(result.error).__name__ if result.error else None, flush=True)\n',
)
"""Tune's custom_func_checkpointing example with ``FailureConfig(max_failures=1)``: every
trial fails at step 5 on its first try (the node it ran on went away), and the trials of
width 20 on their retry too. Tune retries each failed trial from its last checkpoint:
the width 10 trials end at their tenth iteration, the width 20 ones fail twice."""


def test_an_aborted_trial_fails_as_without_podcode_and_failure_config_retries_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """One session opens for the first failure and the three other trials wait on it; the
    engineer aborts: each trial fails with its own error, and Tune retries it from its last
    checkpoint. The width 20 trials hit the bug again on their retry: after an abort it
    opens no session (each fails at once), so the retries are spent as without podcode."""
    with without_podcode(cluster, tmp_path / "off", RETRIED) as reference:
        (tmp_path / "on").mkdir()
        driver = Driver(cluster, tmp_path / "on", {"driver.py": RETRIED}, RAY_DEDUP_LOGS="0")
        try:
            driver.session()
            waiting(driver, 3, "the three other trials waiting on the one session")
            driver.podcode("abort")
            output = driver.finish()
        finally:
            driver.stop()
        expected = trials(reference.finish())
    assert expected[0] == "ERRORS 2" and len(expected) == 5, expected
    assert output.count("opening a debug session") == 1, "an aborted bug opens no other"
    assert output.count("ended without a fix") >= 5, output[-3000:]  # 3 waiting, 2 retried
    assert trials(output) == expected, output[-3000:]


CLASS = f"""\
import json
import os

import ray
from ray import tune
from interactive import vscode

SETTINGS = {SETTINGS}


def objective(x, a, b):
    return a * (x ** 0.5) + b


class Trainable(tune.Trainable):
    def setup(self, config):
        # config (dict): A dict of hyperparameters
        self.x = 0
        self.a = config["a"]
        self.b = config["b"]

    @vscode(**SETTINGS)
    def step(self):  # This is called iteratively.
        score = objective(self.x, self.a, self.c)
        self.x += 1
        return {{"score": score}}

    def save_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "checkpoint.json"), "w") as f:
            json.dump({{"x": self.x}}, f)

    def load_checkpoint(self, checkpoint_dir):
        with open(os.path.join(checkpoint_dir, "checkpoint.json")) as f:
            self.x = json.load(f)["x"]


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    tuner = tune.Tuner(
        Trainable,
        run_config=tune.RunConfig(name="exp", storage_path=os.path.abspath("../results"),
                                  stop={{"training_iteration": 10}},
                                  checkpoint_config=tune.CheckpointConfig(
                                      checkpoint_frequency=3, checkpoint_at_end=True)),
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        param_space={{"a": tune.grid_search([2, 3]), "b": tune.grid_search([0, 10])}},
    )
    results = tuner.fit()
    print("ERRORS", results.num_errors, flush=True)
    for result in sorted(results, key=lambda r: (r.config["a"], r.config["b"])):
        print("TRIAL", result.config["a"], result.config["b"],
              "SCORE", round(result.metrics["score"], 9),
              "ITERATION", result.metrics["training_iteration"],
              "CHECKPOINT", result.checkpoint is not None, flush=True)
"""
"""The class API example of Tune's docs (``setup`` and ``step`` as published; the
``save_checkpoint`` and ``load_checkpoint`` of its checkpointing section), ``@vscode`` on
``step``, with a misspelt attribute that every trial hits at its first step."""


def test_a_class_trainables_step_opens_one_session_and_resumes_to_the_fixed_results(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``@vscode`` on ``step``: one session for the four trials' bug, the fix reaches the
    three that wait, and every trial's score and checkpoint are the fixed program's."""
    fixed = CLASS.replace("self.a, self.c)", "self.a, self.b)")
    with without_podcode(cluster, tmp_path / "off", fixed) as reference:
        resumed, output = fixed_in_session(cluster, tmp_path / "on", CLASS,
                                           ("self.a, self.c)", "self.a, self.b)"), waiters=3)
        expected = trials(reference.finish())
    assert expected[0] == "ERRORS 0" and len(expected) == 5, expected
    assert "Trainable.step" in resumed, resumed
    assert_one_session_one_fix(output, expected, taken=3)


ASHA = f"""\
import os
import time

import ray
from ray import tune
from ray.tune.schedulers import AsyncHyperBandScheduler
from interactive import vscode

SETTINGS = {SETTINGS}


def evaluation_fn(step, width, height):
    time.sleep(0.1)
    return (0.1 + width * step / 100) ** (-1) + height * 0.1


@vscode(**SETTINGS)
def easy_objective(config):
    # Hyperparameters
    width, height = config["width"], config["hieght"]

    for step in range(config["steps"]):
        # Iterative training function - can be any arbitrary training procedure
        intermediate_score = evaluation_fn(step, width, height)
        # Feed the score back back to Tune.
        tune.report({{"iterations": step, "mean_loss": intermediate_score}})


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    # AsyncHyperBand enables aggressive early stopping of bad trials.
    scheduler = AsyncHyperBandScheduler(grace_period=1, max_t=8)
    tuner = tune.Tuner(
        easy_objective,
        run_config=tune.RunConfig(name="asha_test", storage_path=os.path.abspath("../results"),
                                  stop={{"training_iteration": 9999}}),
        tune_config=tune.TuneConfig(metric="mean_loss", mode="min", scheduler=scheduler,
                                    max_concurrent_trials=1),
        param_space={{"steps": 100, "width": tune.grid_search([10, 40]),
                      "height": tune.grid_search([50, 0])}},
    )
    results = tuner.fit()
    print("ERRORS", results.num_errors, flush=True)
    for result in sorted(results, key=lambda r: (r.config["width"], r.config["height"])):
        print("TRIAL", result.config["width"], result.config["height"],
              "LOSS", round(result.metrics["mean_loss"], 9),
              "ITERATION", result.metrics["training_iteration"], flush=True)
"""
"""Tune's async_hyperband_example (its random search over 20 samples replaced by a 2x2 grid
run one trial at a time, so that ASHA's decisions do not depend on which trial reports
first; ``grace_period=1, max_t=8``), with a misspelt config key that every trial hits."""


def test_asha_stops_the_same_trials_after_one_fix_as_in_the_fixed_program(
    cluster: Cluster, tmp_path: Path
) -> None:
    """One session for the first trial's failure; the later trials, in workers of their
    own, take the fix from the board; ASHA stops the same trials at the same rungs as in
    the fixed program, and every trial ends with the same loss."""
    fixed = ASHA.replace('config["hieght"]', 'config["height"]')
    with without_podcode(cluster, tmp_path / "off", fixed) as reference:
        resumed, output = fixed_in_session(cluster, tmp_path / "on", ASHA,
                                           ('config["hieght"]', 'config["height"]'))
        expected = trials(reference.finish())
    assert expected[0] == "ERRORS 0" and len(expected) == 5, expected
    stopped = [line for line in expected if not line.endswith("ITERATION 8")]
    assert stopped, f"ASHA stopped no trial early: {expected}"
    assert "easy_objective" in resumed, resumed
    assert_one_session_one_fix(output, expected, taken=3)


STOP_ALL = f"""\
import glob
import json
import os
import time

import ray
from ray import tune
from interactive import vscode

SETTINGS = {SETTINGS}
HOME = os.environ.get("PODCODE_HOME", "")


def evaluation_fn(step, width, height):
    time.sleep(0.1)
    return (0.1 + width * step / 100) ** (-1) + height * 0.1 + 1 / (width - 20)


def waiting():
    records = (json.load(open(path)) for path in glob.glob(HOME + "/sessions/*/session.json"))
    return [record for record in records if record.get("state") == "waiting"]


class FirstToTen(tune.Stopper):
    \"\"\"Ends the experiment once a trial reached ten iterations (and the session of the
    width 20 trials' bug waits).\"\"\"

    def __init__(self):
        self.done = False

    def __call__(self, trial_id, result):
        self.done = self.done or result["training_iteration"] >= 10
        return False

    def stop_all(self):
        return self.done and bool(waiting())


@vscode(**SETTINGS)
def train_func(config):
    width, height = config["width"], config["height"]
    for step in range(100):
        intermediate_score = evaluation_fn(step, width, height)
        tune.report({{"iterations": step, "mean_loss": intermediate_score}})


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    tuner = tune.Tuner(
        train_func,
        run_config=tune.RunConfig(name="exp", storage_path=os.path.abspath("../results"),
                                  stop=FirstToTen()),
        tune_config=tune.TuneConfig(metric="mean_loss", mode="min"),
        param_space={{"width": tune.grid_search([10, 20]),
                      "height": tune.grid_search([0, -50])}},
    )
    results = tuner.fit()
    print("ERRORS", results.num_errors, flush=True)
    print("DONE", flush=True)
"""
"""An experiment that a stopper ends (``stop_all``) while the trials of width 20, which
divide by ``width - 20``, wait: one in its session, one on the board."""


def test_an_experiment_that_tune_ends_while_trials_wait_ends_with_no_error_and_no_session(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Tune decides on reports, and a trial that waits makes none: only the experiment's
    end (here a stopper's ``stop_all``) stops it. Its worker is killed; ``Tuner.fit()``
    returns with no error for the trials that waited, and no session is left open."""
    import psutil

    driver = Driver(cluster, tmp_path, {"driver.py": STOP_ALL}, RAY_DEDUP_LOGS="0")
    try:
        driver.session()
        waiting(driver, 1, "the other width 20 trial waiting on the session")
        output = driver.finish()
    finally:
        driver.stop()
    assert "ERRORS 0" in output and "DONE" in output, output[-3000:]
    assert output.count("opening a debug session") == 1, output[-3000:]
    left = [record["pid"] for record in driver.records("waiting")
            if psutil.pid_exists(record["pid"])]
    assert not left, f"sessions left open in {left}"


DATA = f"""\
import ray
from interactive import vscode

SETTINGS = {SETTINGS}
OFFSET = 100


@vscode(**SETTINGS)
def shift(batch):
    batch["shifted"] = batch["id"] + batch["offset"]
    return batch


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    ds = ray.data.range(16, override_num_blocks=4).map_batches(shift, batch_size=4)
    print("RESULT", sorted(int(row["shifted"]) for row in ds.take_all()), flush=True)
"""
"""A Ray Data pipeline whose ``map_batches`` callable reads a column that is not there:
every block's task hits the bug."""


def test_ray_data_map_batches_tasks_share_one_session_and_end_with_the_fixed_result(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The map tasks of ``map_batches`` go through the board as any Ray task: one session,
    the other tasks wait (or, started later, take the fix), and the dataset is the fixed
    program's."""
    fixed = DATA.replace('batch["offset"]', "OFFSET")
    with without_podcode(cluster, tmp_path / "off", fixed) as reference:
        resumed, output = fixed_in_session(cluster, tmp_path / "on", DATA,
                                           ('batch["offset"]', "OFFSET"))
        expected = [line for line in reference.finish().splitlines()
                    if line.startswith("RESULT")]
    assert expected == [f"RESULT {list(range(100, 116))}"], expected
    assert "shift" in resumed, resumed
    assert output.count("opening a debug session") == 1, output[-3000:]
    assert [line for line in output.splitlines() if line.startswith("RESULT")] == expected



RESTORED = TUNE_STOPPED.replace('config["hieght"]', 'config["height"]').replace(
    "    return (0.1 + width * step / 100) ** (-1) + height * 0.1\n",
    "    return (0.1 + width * step / 100) ** (-1) + height * 0.1 + 1 / (step - 5)\n",
).replace("""    tuner = tune.Tuner(
        train_func,
        run_config=tune.RunConfig(name="exp", storage_path=os.path.abspath("../results"),
""", """    storage = os.environ["EXPERIMENTS"]
    if tune.Tuner.can_restore(os.path.join(storage, "exp")):
        print("RESTORING", flush=True)
        tuner = tune.Tuner.restore(os.path.join(storage, "exp"), trainable=train_func)
    else:
        tuner = tune.Tuner(
        train_func,
        run_config=tune.RunConfig(name="exp", storage_path=storage,
""")
"""Tune's custom_func_checkpointing example whose evaluation divides by ``step - 5``: every
trial fails at step 5, its checkpoint of step 4 saved. Run again, it restores the
experiment (``Tuner.restore``) when there is one to restore."""
FIXED_TERM = " + 1 / (step - 5)"


def test_an_interrupted_experiment_restored_with_its_bug_opens_one_session_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Ctrl-C while one trial's session and three waiting trials hold the experiment: Tune
    saves it and ends. ``Tuner.restore`` runs each trial again from its last checkpoint
    (step 4): the bug opens one session again, the fix reaches the three others, and the
    results are the fixed program's."""
    import signal

    assert FIXED_TERM in RESTORED and "Tuner.restore" in RESTORED
    experiments = str(tmp_path / "results")
    with without_podcode(cluster, tmp_path / "off", RESTORED.replace(FIXED_TERM, ""),
                         EXPERIMENTS=str(tmp_path / "off" / "results")) as reference:
        (tmp_path / "on").mkdir()
        first = Driver(cluster, tmp_path / "on", {"driver.py": RESTORED}, RAY_DEDUP_LOGS="0",
                       EXPERIMENTS=experiments)
        try:
            first.session()
            waiting(first, 3, "the three other trials waiting on the one session")
            first.process.send_signal(signal.SIGINT)  # Ctrl-C
            first.process.wait(120)
        finally:
            first.stop()
        assert "Experiment has been interrupted" in first.output(), first.output()[-3000:]
        resumed, output = fixed_in_session(cluster, tmp_path / "again", RESTORED,
                                           (FIXED_TERM, ""), waiters=3, EXPERIMENTS=experiments)
        expected = trials(reference.finish())
    assert expected[0] == "ERRORS 0" and len(expected) == 5, expected
    assert "evaluation_fn" in resumed, resumed
    assert "RESTORING" in output and output.count("opening a debug session") == 1, output[-3000:]
    assert trials(output) == expected, output[-3000:]
