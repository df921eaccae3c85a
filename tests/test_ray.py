"""Ray, as its users run it: a real local cluster started with ``ray start`` (no PODCODE_*
in its environment), a driver with a ``working_dir``, remote functions in both decorator
orders, defined in the driver script (shipped by value) and in a module, an actor."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ray_cluster import Cluster, ray_cluster, ray_node
from tests.ray_driver import SETTINGS, TUNE_STOPPED, Driver, trials, waiting
from tests.waiting import wait_until

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


MAP = f"""\
import ray
from interactive import vscode
from helpers import bonus

SETTINGS = {SETTINGS}


def share(x):
    return 12 / x


@ray.remote(max_retries=0)
@vscode(**SETTINGS)
def work(x):
    return share(x) + bonus(x)


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    print("RESULT", ray.get([work.remote(x) for x in (1, 0, 0, 0)]), flush=True)
"""
HELPERS = "def bonus(x):\n    return x + 10\n"
SUBMITTED = {"driver.py": MAP.replace('ray.init(runtime_env={"working_dir": "."})', "ray.init()"),
             "helpers.py": HELPERS}
"""MAP as ``ray job submit`` runs it: the working_dir comes from the job's runtime env."""

SHAPES = f"""\
import ray
from interactive import vscode

SETTINGS = {SETTINGS}


@vscode(**SETTINGS)
@ray.remote(max_retries=0)
def ratio(x):
    return 10 / x


@vscode(**SETTINGS)  # over the actor class: its methods
@ray.remote
class Counter:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += 10 / x
        return self.total


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    print("OPTIONS", ray.get(ratio.options(num_cpus=0.5).remote(5)), flush=True)
    counter = Counter.remote()
    print("ACTOR", ray.get(counter.add.remote(2)), flush=True)
    print("RESULT", ray.get([ratio.remote(0), counter.add.remote(0)]), flush=True)
"""


RETRIED = f"""\
import ray
from interactive import vscode

SETTINGS = {SETTINGS}


@ray.remote(max_retries=2, retry_exceptions=True)
@vscode(**SETTINGS)
def flaky(x):
    return 10 / x


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    try:
        ray.get(flaky.remote(0))
    except ZeroDivisionError as exc:
        print("RAISED", type(exc).__name__, flush=True)
"""


WAITING = """\
def waiting(home):
    \"\"\"The records of this job's sessions that wait now.\"\"\"
    records = (json.load(open(path)) for path in glob.glob(home + "/sessions/*/session.json"))
    return [record for record in records if record.get("state") == "waiting"]
"""
"""The drivers' look at their own sessions (run inside the driver script)."""


CANCELLED = f"""\
import glob, json, os, time
import ray
from interactive import vscode

SETTINGS = {SETTINGS}


@ray.remote(max_retries=0)
@vscode(**SETTINGS)
def work(x):
    return 10 / x


{WAITING}

if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    ref = work.remote(0)
    home = os.environ["PODCODE_HOME"]
    while not waiting(home):
        time.sleep(0.2)
    with open(os.path.join(waiting(home)[0]["workspace"], "driver.py"), "a") as script:
        script.write("# the engineer's edit, before the job is cancelled\\n")
    ray.cancel(ref)
    try:
        ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        print("CANCELLED", flush=True)
"""


BOUNDED = f"""\
import glob, json, os, time
import ray
from interactive import vscode

SETTINGS = {SETTINGS}


@ray.remote(max_retries=0)
@vscode(**SETTINGS)
def first(x):
    return 10 / x


@ray.remote(max_retries=0)
@vscode(**SETTINGS)
def second(x):
    return [][x]


{WAITING}

if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    held = first.remote(0)
    while not waiting(os.environ["PODCODE_HOME"]):
        time.sleep(0.2)
    try:
        ray.get(second.remote(3))
    except IndexError:
        print("SECOND RAISED, sessions:", len(waiting(os.environ["PODCODE_HOME"])), flush=True)
    try:
        ray.get(held)
    except ZeroDivisionError:
        print("FIRST RAISED", flush=True)
"""


TUNED = f"""\
import json, os, tempfile
import ray
from ray import tune
from interactive import vscode

SETTINGS = {SETTINGS}


@vscode(**SETTINGS)
def trainable(config):
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint:  # as Tune's fault tolerance asks: go on from the last checkpoint
        with checkpoint.as_directory() as folder:
            start = json.load(open(os.path.join(folder, "state.json")))["step"] + 1
    for step in range(start, 4):
        loss = config["lr"] / (step - 2)
        with tempfile.TemporaryDirectory() as folder:
            json.dump({{"step": step}}, open(os.path.join(folder, "state.json"), "w"))
            tune.report({{"loss": loss, "step": step}},
                        checkpoint=tune.Checkpoint.from_directory(folder))


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    tuner = tune.Tuner(
        trainable,
        param_space={{"lr": tune.grid_search([0.5, 0.25])}},
        run_config=tune.RunConfig(storage_path=os.path.abspath("../results"), name="exp",
                                  failure_config=tune.FailureConfig(max_failures=1)),
    )
    results = tuner.fit()
    print("ERRORS", results.num_errors, flush=True)
    for result in sorted(results, key=lambda result: result.config["lr"]):
        history = result.metrics_dataframe
        print("TRIAL", result.config["lr"], "STEPS", list(history["step"]),
              "ITERATIONS", list(history["training_iteration"]), flush=True)
"""
"""Two Ray Tune trials written as Tune's fault tolerance asks (each goes on from
``tune.get_checkpoint()``); both fail at their third step, at the same line."""


NESTED = f"""\
import ray
from interactive import vscode

SETTINGS = {SETTINGS}


@ray.remote(max_retries=0)
@vscode(**SETTINGS)
def score(batch):
    weights = ray.get(batch["weights"])  # a reference inside an argument: Ray leaves it
    return sum(weights) / batch["count"]


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    batch = {{"weights": ray.put([1.0, 2.0, 3.0]), "count": 0}}
    print("RESULT", ray.get(score.remote(batch)), flush=True)
"""
"""A task whose argument holds an ObjectRef (Ray resolves only top-level ones)."""


TWO_NODES = MAP.replace("""    ray.init(runtime_env={"working_dir": "."})
    print("RESULT", ray.get([work.remote(x) for x in (1, 0, 0, 0)]), flush=True)
""", """    ray.init(runtime_env={"working_dir": "."})
    there = work.options(num_cpus=0, resources={"second": 1}).remote(0)
    while not waiting(os.environ["PODCODE_HOME"]):
        time.sleep(0.2)
    here = [work.remote(x) for x in (1, 0)]
    print("RESULT", ray.get([there, *here]), flush=True)
""").replace("import ray\n", "import glob, json, os, time\nimport ray\n", 1).replace(
    "\n\nif __name__", f"\n\n{WAITING}\n\nif __name__", 1)
"""MAP on two nodes: the bug is hit first on the second node, then on the head."""

DEBUG_AGAIN = """\
import ray
from interactive import load_inputs

(batch,), _ = load_inputs("driver.py:score")
print("LOADED", type(batch["weights"]).__name__, ray.get(batch["weights"]), batch["count"])
"""
""""Debug again" in another process: the captured inputs, and what their reference holds."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with ray_cluster(dashboard=True, prestart=False) as running:
        yield running


def test_one_session_per_bug_and_every_task_gets_the_fix(cluster: Cluster, tmp_path: Path) -> None:
    driver = Driver(cluster, tmp_path, {"driver.py": MAP, "helpers.py": HELPERS})
    try:
        record = driver.session()
        wait_until(lambda: "waits for its outcome" in driver.output(),
                   "a task waiting on the first one's session", 60, 0.2)
        assert len(driver.records()) == 1, "one bug, one session"
        wait_until(lambda: "more task(s) hit this bug and wait" in driver.podcode("status"),
                   "the session's status saying that tasks wait for its fix", 60, 1.0)
        workspace = Path(record["workspace"])
        assert workspace in cluster.copies(), "the IDE opens the node's working_dir copy"
        script = workspace / "driver.py"
        script.write_text(script.read_text().replace("12 / x", "12 / (x or 4)"))
        helpers = workspace / "helpers.py"
        helpers.write_text(helpers.read_text().replace("x + 10", "x + 100"))

        said = driver.podcode("resume")

        assert "__main__.share" in said and "helpers.bonus" in said, said
        output = driver.finish()
    finally:
        driver.stop()
    assert "RESULT [23.0, 103.0, 103.0, 103.0]" in output, output[-3000:]
    assert output.count("opening a debug session") == 1, "one bug, one session"
    assert output.count("fixed in its session; this task runs again") == 2
    assert str(workspace) + "/driver.py" in output, "tracebacks name the copy's file"
    patch = driver.podcode("edits", "driver.py:work")
    assert "+    return 12 / (x or 4)" in patch and "helpers.py" in patch, patch


def test_both_orders_options_and_an_actor_resumed_on_its_state(
    cluster: Cluster, tmp_path: Path
) -> None:
    driver = Driver(cluster, tmp_path, {"driver.py": SHAPES})
    try:
        records = wait_until(lambda: len(driver.records("waiting")) == 2 and
                             driver.records("waiting"), "two sessions", 120, 0.2)
        tasks = sorted(r["task"] for r in records)
        assert tasks == ["driver.py:Counter.add", "driver.py:ratio"]
        assert "OPTIONS 2.0" in driver.output() and "ACTOR 5.0" in driver.output()
        for record in records:
            said = driver.podcode("resume", "--session", record["session"])
            assert "nothing patched" in said, said  # no edit yet: said so, not "fixed"
        wait_until(lambda: len(driver.records("waiting")) == 2 and
                   driver.output().count("failed again") == 2, "both waiting again", 60, 0.2)
        script = Path(records[0]["workspace"]) / "driver.py"
        script.write_text(script.read_text().replace("10 / x", "10 / (x or 5)"))
        for record in records:
            said = driver.podcode("resume", "--session", record["session"])
            assert "patched" in said and "nothing patched" not in said, said
        output = driver.finish()
    finally:
        driver.stop()
    assert "RESULT [2.0, 7.0]" in output, output[-3000:]  # the actor kept its total, 5
    assert "cannot be saved" not in output, "the actor's self (a class shipped by value) too"


def test_a_new_bug_past_the_nodes_bound_raises_without_a_session(
    cluster: Cluster, tmp_path: Path
) -> None:
    driver = Driver(cluster, tmp_path, {"driver.py": BOUNDED},
                    PODCODE_RAY_MAX_SESSIONS_PER_NODE="1")
    try:
        driver.session()
        wait_until(lambda: "SECOND RAISED" in driver.output(), "the second task's failure",
                   120, 0.2)
        driver.podcode("abort")
        output = driver.finish()
    finally:
        driver.stop()
    assert "SECOND RAISED, sessions: 1" in output, output[-3000:]
    assert "no session opens for this task: 1 sessions are open on this node " \
           "(ray_max_sessions_per_node=1)" in output, output[-3000:]
    assert output.count("opening a debug session") == 1
    assert "FIRST RAISED" in output


def test_ray_retries_do_not_open_a_session_again_after_an_abort(
    cluster: Cluster, tmp_path: Path
) -> None:
    driver = Driver(cluster, tmp_path, {"driver.py": RETRIED})
    try:
        driver.session()
        driver.podcode("abort")
        output = driver.finish()
    finally:
        driver.stop()
    assert "RAISED" in output and "ZeroDivisionError" in output, output[-3000:]
    assert output.count("opening a debug session") == 1, "Ray's two retries open none"
    assert output.count("retries remaining, so the task will be retried") == 2
    assert "the session for this bug ended without a fix" in output, output[-3000:]


def test_ray_job_submit_with_the_settings_in_the_jobs_runtime_env(
    cluster: Cluster, tmp_path: Path
) -> None:
    driver = Driver(cluster, tmp_path, SUBMITTED, submit="podcode-settings")
    try:
        workspace, resumed = driver.fix("12 / x", "12 / (x or 4)")
        assert workspace in cluster.copies()
        assert "__main__.share" in resumed
        output = driver.finish()
    finally:
        driver.stop()
    assert "RESULT [23.0, 13.0, 13.0, 13.0]" in output, output[-3000:]
    assert "succeeded" in output


def test_ray_cancel_ends_the_waiting_session_with_the_edits_saved(
    cluster: Cluster, tmp_path: Path
) -> None:
    driver = Driver(cluster, tmp_path, {"driver.py": CANCELLED})
    try:
        output = driver.finish()
    finally:
        driver.stop()
    assert "CANCELLED" in output, output[-3000:]  # ray.get answers before the worker is done

    # In the whole suite the worker takes longer to reach its save (not understood yet).
    patch = wait_until(lambda: driver.edits("driver.py:work"),
                       "the edits saved by the cancelled session", 240, 0.5)
    assert "+# the engineer's edit, before the job is cancelled" in patch, patch


def test_ray_job_stop_keeps_the_edits_made_in_the_session(cluster: Cluster, tmp_path: Path) -> None:
    """``ray job stop`` kills the job's workers, the waiting one with them, without a chance
    to save: the edits made in the session are in the store already, saved as they were
    made (within ``poll_seconds``)."""
    files = {**SUBMITTED, "driver.py": SUBMITTED["driver.py"] + "# a package of its own\n"}
    driver = Driver(cluster, tmp_path, files, submit="podcode-stopped")
    try:
        record = driver.session()
        helpers = Path(record["workspace"]) / "helpers.py"
        helpers.write_text(HELPERS + "# the engineer's edit, before the job is stopped\n")
        wait_until(lambda: "+# the engineer's edit" in driver.edits("driver.py:work"),
                   "the edit saved while the session waits", 60, 0.5)
        subprocess.run([str(Path(sys.executable).with_name("ray")), "job", "stop", "--address",
                        str(cluster.dashboard), "podcode-stopped"], env=driver.env, check=True,
                       capture_output=True, timeout=120)
        driver.process.wait(120)
    finally:
        driver.stop()
    patch = driver.edits("driver.py:work")
    assert "+# the engineer's edit, before the job is stopped" in patch, patch


def test_tune_trials_resume_from_their_last_checkpoint_and_tune_sees_each_step_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Two trials hit one bug: one session opens, the other trial waits for it. Tune runs
    each trial in a folder of its own (its results, not the code): the IDE opens the
    node's copy of the code all the same and the fix goes there. Both trials take the fix
    and go on from the checkpoint they reported last: Tune records steps 0 to 3 once each,
    and no trial errs or is retried."""
    driver = Driver(cluster, tmp_path, {"driver.py": TUNED})
    try:
        driver.session()
        wait_until(lambda: "waits for its outcome" in driver.output(),
                   "the other trial waiting on the session", 120, 0.2)
        _, resumed = driver.fix("(step - 2)", "(step + 2)")  # in the copy, not the trial's
        assert "__main__.trainable" in resumed
        output = driver.finish()
    finally:
        driver.stop()
    assert output.count("opening a debug session") == 1, "one bug, one session"
    assert "ERRORS 0" in output, output[-3000:]
    for lr in ("0.25", "0.5"):
        assert f"TRIAL {lr} STEPS [0, 1, 2, 3] ITERATIONS [1, 2, 3, 4]" in output, output[-3000:]


def test_an_objectref_inside_an_argument_is_saved_with_its_object(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The captured inputs hold the nested reference's object: another process ("debug
    again", connected to a Ray of its own choosing) gets a reference to the same values."""
    driver = Driver(cluster, tmp_path, {"driver.py": NESTED})
    try:
        driver.session()
        again = subprocess.run([sys.executable, "-c", DEBUG_AGAIN], capture_output=True,
                               text=True, timeout=120, check=False,
                               env={**driver.env, "PODCODE_HOME": str(driver.home)})
        driver.podcode("abort")
        driver.process.wait(120)
    finally:
        driver.stop()
    assert "LOADED ObjectRef [1.0, 2.0, 3.0] 0" in again.stdout, again.stdout + again.stderr


def test_a_bug_hit_on_two_nodes_opens_one_session_and_the_fix_reaches_both_copies(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A second node joins with ``ray start --address`` (an address and a temp folder of its
    own, as a second pod). The bug is hit there first: the session opens in that node's
    working_dir copy. A task on the head hits it next and waits; the engineer's fix goes
    into the head's own copy too, and every task returns the fixed value."""
    with ray_node(cluster, "127.0.0.2", '{"second": 2}') as second:
        driver = Driver(cluster, tmp_path, {"driver.py": TWO_NODES, "helpers.py": HELPERS})
        try:
            workspace = Path(driver.session()["workspace"])
            assert workspace in second.copies(), "the IDE opens the second node's copy"
            wait_until(lambda: "waits for its outcome" in driver.output(),
                       "the head's task waiting on the second node's session", 120, 0.2)
            script = workspace / "driver.py"
            script.write_text(script.read_text().replace("12 / x", "12 / (x or 4)"))
            said = driver.podcode("resume")
            output = driver.finish()
        finally:
            driver.stop()
        head_copies = [copy for copy in cluster.copies() if (copy / "driver.py").is_file()
                       and "there = work" in (copy / "driver.py").read_text()]
    assert "__main__.share" in said, said
    assert "RESULT [13.0, 23.0, 13.0]" in output, output[-3000:]
    assert output.count("opening a debug session") == 1, "one bug, one session"
    assert head_copies and all("12 / (x or 4)" in (copy / "driver.py").read_text()
                               for copy in head_copies), "the fix, in the head's copy too"


def test_tune_stopped_trials_resume_to_the_fixed_programs_results(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Tune stops each trial at its tenth report, so the decorated function never returns:
    the fix reaches the waiting trials when the session resumes, and the board (made in a
    trial's placement group before) outlives the trial that made it."""
    fixed = TUNE_STOPPED.replace('config["hieght"]', 'config["height"]')
    (tmp_path / "off").mkdir()
    reference = Driver(cluster, tmp_path / "off", {"driver.py": fixed}, PODCODE_ENABLE="0")
    expected = trials(reference.finish())
    assert len(expected) == 5 and expected[0] == "ERRORS 0", expected
    (tmp_path / "on").mkdir()
    driver = Driver(cluster, tmp_path / "on", {"driver.py": TUNE_STOPPED}, RAY_DEDUP_LOGS="0")
    try:
        driver.session()
        waiting(driver, 3, "the three other trials waiting on the one session")
        _, resumed = driver.fix('config["hieght"]', 'config["height"]')
        assert "__main__.train_func" in resumed, resumed
        output = driver.finish()
    finally:
        driver.stop()
    assert output.count("opening a debug session") == 1, "one bug, one session"
    assert output.count("fixed in its session; this task runs again") == 3, output[-3000:]
    assert trials(output) == expected, output[-3000:]


ORPHANED = f"""\
import ray
from interactive import vscode

SETTINGS = {SETTINGS}


@ray.remote(max_retries=0)
@vscode(**SETTINGS)
def work(x):
    return 12 / x


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    results = []
    for ref in [work.remote(0), work.remote(0)]:
        try:
            results.append(ray.get(ref))
        except ray.exceptions.RayError as exc:
            results.append(type(exc).__name__)
    print("RESULT", sorted(map(str, results)), flush=True)
"""
"""Two tasks hit one bug; the first one's worker will be killed while its session waits."""


def test_a_dead_owners_bug_is_taken_over_by_the_task_that_waits_on_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The owner's worker is SIGKILLed (the OOM killer, a lost node): within seconds the
    task that waited on its session opens its own, and the fix made there reaches it."""
    import os
    import signal
    import time

    driver = Driver(cluster, tmp_path, {"driver.py": ORPHANED})
    try:
        first = driver.session()
        wait_until(lambda: "waits for its outcome" in driver.output(),
                   "the other task waiting on the session", 120, 0.2)
        os.kill(first["pid"], signal.SIGKILL)
        killed = time.monotonic()

        def taken_over() -> list[dict[str, Any]]:
            return [record for record in driver.records("waiting")
                    if record["pid"] != first["pid"]]

        (second,) = wait_until(taken_over, "the waiting task's own session", 60, 0.2)
        print(f"dead owner released in {time.monotonic() - killed:.1f} s")
        script = Path(second["workspace"]) / "driver.py"
        script.write_text(script.read_text().replace("12 / x", "12 / (x or 4)"))
        said = driver.podcode("resume", "--session", second["session"])
        assert "__main__.work" in said, said
        output = driver.finish()
    finally:
        driver.stop()
    assert "RESULT ['3.0', 'WorkerCrashedError']" in output, output[-3000:]
    assert output.count("opening a debug session") == 2, output[-3000:]


ASYNC_MAP = f"""\
import asyncio

import ray
from interactive import vscode

SETTINGS = {SETTINGS}


@vscode(**SETTINGS)
async def fetch(x):
    await asyncio.sleep(0.01)
    return 12 / x


@ray.remote(max_retries=0)
def work(x):
    return asyncio.run(fetch(x))  # as Ray asks of async code in a task


@ray.remote
class Scorer:
    @vscode(**SETTINGS)
    async def score(self, x):
        await asyncio.sleep(0.01)
        return 24 / x


if __name__ == "__main__":
    ray.init(runtime_env={{"working_dir": "."}})
    scorer = Scorer.remote()
    print("RESULT", ray.get([work.remote(x) for x in (1, 0, 0)]),
          ray.get([scorer.score.remote(x) for x in (0, 0)]), flush=True)
"""
"""A coroutine run by a remote function (Ray refuses ``async def`` remote functions) and
an async actor's method, each bug hit by several calls."""


def test_async_tasks_and_actor_methods_go_through_the_bug_board(
    cluster: Cluster, tmp_path: Path
) -> None:
    driver = Driver(cluster, tmp_path, {"driver.py": ASYNC_MAP}, RAY_DEDUP_LOGS="0")
    try:
        first = driver.session()
        wait_until(lambda: "waits for its outcome" in driver.output(),
                   "a task waiting on the first one's session", 120, 0.2)
        assert len(driver.records()) == 1, "one bug, one session"
        script = Path(first["workspace"]) / "driver.py"
        script.write_text(script.read_text().replace("12 / x", "12 / (x or 4)"))
        driver.podcode("resume")
        second = wait_until(lambda: [r for r in driver.records("waiting")
                                     if r["session"] != first["session"]],
                            "the actor's bug in a session of its own", 120, 0.2)[0]
        waiting(driver, 2, "the actor's second call waiting on that session")
        script = Path(second["workspace"]) / "driver.py"
        script.write_text(script.read_text().replace("24 / x", "24 / (x or 6)"))
        driver.podcode("resume", "--session", second["session"])
        output = driver.finish()
    finally:
        driver.stop()
    assert "RESULT [12.0, 3.0, 3.0] [4.0, 4.0]" in output, output[-3000:]
    assert output.count("opening a debug session") == 2, "two bugs, two sessions"
