"""Fault tolerance end to end: real child processes, real SIGTERM, a real store on disk.

Each scenario writes a small script into ``tmp_path`` and runs it with this
interpreter, as a workflow step would run in a pod.
"""

from __future__ import annotations

import collections.abc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from interactive.base.names import folder_name


def stored(tmp_path: Path, kind: str, task: str) -> Path:
    """The store's folder of ``kind`` (checkpoints, cache) for ``task``."""
    return tmp_path / "store" / kind / folder_name(task)

REPO = Path(__file__).resolve().parents[1]
WAIT_SECONDS = 120.0


@pytest.fixture
def env(tmp_path: Path, podcode_home: Path) -> dict[str, str]:
    values = dict(os.environ)
    values.update(
        PODCODE_HOME=str(podcode_home),
        PODCODE_STORE=str(tmp_path / "store"),
        PODCODE_ENABLE="1",
        PYTHONUNBUFFERED="1",
    )
    return values


@pytest.fixture
def children() -> collections.abc.Iterator[list[subprocess.Popen[str]]]:
    """Every child started by a test; any still running at the end is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)


def write_script(tmp_path: Path, name: str, source: str) -> Path:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    return script


def start(
    children: list[subprocess.Popen[str]], script: Path, env: dict[str, str], *args: str
) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=script.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children.append(child)
    return child


def run(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
    )


def wait_for(child: subprocess.Popen[str], ready: collections.abc.Callable[[], bool]) -> None:
    """Wait until ``ready()`` (or fail if the child died first)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not ready():
        if child.poll() is not None:
            out, err = child.communicate()
            pytest.fail(f"child exited with {child.returncode} too early:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail("child never became ready")
        time.sleep(0.02)


def terminate(child: subprocess.Popen[str]) -> tuple[int, str, str]:
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=WAIT_SECONDS)
    return child.returncode, out, err


def partials(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.partial")]


# -- preemption with the building blocks only ------------------------------------------------

DIRECT_TRAIN = """
import json, sys, time
from pathlib import Path
from interactive.task import preempt
from interactive.storage.checkpoint import atomic_write, checkpoint_dir, sync_checkpoints

TASK = "e2e.train"
ready, stop_at = Path(sys.argv[1]), int(sys.argv[2])
ckpt = checkpoint_dir(TASK) / "state.json"
state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0}
start = state["step"]
print("start", start)

def save():
    with atomic_write(ckpt, "w") as fh:
        json.dump(state, fh)

preempt.install()
while preempt.check_alive():
    state["step"] += 1
    if state["step"] == start + 5:
        ready.touch()
    if stop_at and state["step"] >= stop_at:
        break
    time.sleep(0.002)
if not preempt.check_alive():
    errors = preempt.run_hooks([save], 25)
    sync_checkpoints(TASK)
    print("errors", errors)
    sys.exit(preempt.exit_status())
print("done", state["step"])
"""


def test_sigterm_mid_loop_checkpoints_and_a_new_process_resumes(
    tmp_path: Path, env: dict[str, str], children: list[subprocess.Popen[str]]
) -> None:
    script = write_script(tmp_path, "direct_train.py", DIRECT_TRAIN)
    ready = tmp_path / "ready"
    first = start(children, script, env, str(ready), "0")
    wait_for(first, ready.exists)
    status, out, err = terminate(first)
    assert status == 143, err
    assert "errors []" in out

    saved = tmp_path / "store" / "checkpoints" / "e2e.train" / "state.json"
    step = json.loads(saved.read_text())["step"]
    assert step >= 5
    assert partials(tmp_path / "store") == []

    second = run(script, env, str(tmp_path / "ready2"), str(step + 3))
    assert second.returncode == 0, second.stderr
    assert f"start {step}" in second.stdout
    assert f"done {step + 3}" in second.stdout


# -- the decorator ------------------------------------------------------------------------------

DECORATED_TRAIN = """
import json, sys, time
from pathlib import Path
import interactive
from interactive import vscode
from interactive.storage.checkpoint import atomic_write

ready, steps_wanted = Path(sys.argv[1]), int(sys.argv[2])
state = {}

def save():
    with atomic_write(interactive.checkpoint_dir() / "state.json", "w") as fh:
        json.dump(state, fh)

@vscode(ide="none", on_preempt=save, control_port=0, debug_port=0)
def train(steps_wanted):
    ckpt = interactive.checkpoint_dir() / "state.json"
    state.update(json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0})
    start = state["step"]
    print("start", start)
    while interactive.check_alive():
        state["step"] += 1
        if state["step"] == start + 5:
            ready.touch()
        if steps_wanted and state["step"] >= start + steps_wanted:
            break
        time.sleep(0.002)
    return state["step"]

print("done", train(steps_wanted))
"""


def test_decorated_loop_stops_on_sigterm_saves_and_exits_143(
    tmp_path: Path, env: dict[str, str], children: list[subprocess.Popen[str]]
) -> None:
    script = write_script(tmp_path, "decorated_train.py", DECORATED_TRAIN)
    ready = tmp_path / "ready"
    first = start(children, script, env, str(ready), "0")
    wait_for(first, ready.exists)
    status, out, err = terminate(first)
    assert status == 143, f"{out}\n{err}"
    assert "done" not in out

    saved = stored(tmp_path, "checkpoints", "decorated_train.py:train") / "state.json"
    step = json.loads(saved.read_text())["step"]
    assert step >= 5

    second = run(script, env, str(tmp_path / "ready2"), "3")
    assert second.returncode == 0, second.stderr
    assert f"start {step}" in second.stdout and f"done {step + 3}" in second.stdout


FAILING_TASK = """
import json
import interactive
from interactive import vscode
from interactive.storage.checkpoint import atomic_write

def save():
    with atomic_write(interactive.checkpoint_dir() / "emergency.json", "w") as fh:
        json.dump({"saved": True}, fh)

@vscode(ide="none", on_preempt=save, control_port=0, debug_port=0)
def train():
    raise RuntimeError("diverged")

train()
"""


def test_sigterm_while_the_debug_session_waits_runs_hooks_and_exits_143(
    tmp_path: Path, env: dict[str, str], children: list[subprocess.Popen[str]]
) -> None:
    script = write_script(tmp_path, "failing_task.py", FAILING_TASK)
    child = start(children, script, env)
    session_file = Path(env["PODCODE_HOME"]) / "session.json"

    def waiting() -> bool:
        try:
            return bool(json.loads(session_file.read_text()).get("state") == "waiting")
        except (OSError, ValueError):
            return False

    wait_for(child, waiting)
    status, out, err = terminate(child)
    assert status == 143, f"{out}\n{err}"
    saved = stored(tmp_path, "checkpoints", "failing_task.py:train") / "emergency.json"
    assert json.loads(saved.read_text()) == {"saved": True}


CACHED_STEP = """
import sys
from pathlib import Path
import numpy as np
from interactive import vscode

runs = Path(sys.argv[1])

@vscode(cache=True, cache_version="1", ide="none")
def preprocess(data, scale=2.0):
    with runs.open("a") as fh:
        fh.write("ran\\n")
    return {"out": data * scale, "n": len(data)}

result = preprocess(np.arange(1_000_000, dtype=np.float64), scale=3.0)
print("result", result["n"], float(result["out"].sum()))
"""


def test_cache_hit_in_a_second_process_skips_the_task(tmp_path: Path, env: dict[str, str]) -> None:
    script = write_script(tmp_path, "cached_step.py", CACHED_STEP)
    runs = tmp_path / "runs.log"
    first = run(script, env, str(runs))
    second = run(script, env, str(runs))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout
    assert "result 1000000" in first.stdout
    assert runs.read_text().count("ran") == 1
    entries = list((stored(tmp_path, "cache", "cached_step.py:preprocess")).glob("*.pkl"))
    assert len(entries) == 1

    bumped = run(script, dict(env, PODCODE_CACHE_VERSION="2"), str(runs))
    assert bumped.returncode == 0, bumped.stderr
    assert runs.read_text().count("ran") == 2


def test_corrupt_cache_entry_is_recomputed(tmp_path: Path, env: dict[str, str]) -> None:
    script = write_script(tmp_path, "cached_step.py", CACHED_STEP)
    runs = tmp_path / "runs.log"
    assert run(script, env, str(runs)).returncode == 0
    (entry,) = (stored(tmp_path, "cache", "cached_step.py:preprocess")).glob("*.pkl")
    entry.write_bytes(entry.read_bytes()[:100])
    again = run(script, env, str(runs))
    assert again.returncode == 0, again.stderr
    assert "corrupt" in again.stderr
    assert runs.read_text().count("ran") == 2


FLAKY_TASK = """
import json, sys
from pathlib import Path
import interactive
from interactive import vscode
from interactive.storage.checkpoint import atomic_write

calls = Path(sys.argv[1])

@vscode(retries=2, ide="none", control_port=0, debug_port=0)
def flaky(x):
    progress = interactive.checkpoint_dir() / "progress.json"
    attempts = json.loads(progress.read_text())["attempts"] if progress.exists() else 0
    with atomic_write(progress, "w") as fh:
        json.dump({"attempts": attempts + 1}, fh)
    with calls.open("a") as fh:
        fh.write(f"{x}\\n")
    if attempts + 1 < 3:
        raise ConnectionError(f"transient failure {attempts + 1}")
    return x * 10

print("result", flaky(4))
"""


def test_retries_fail_twice_then_succeed_with_the_checkpoint_there(
    tmp_path: Path, env: dict[str, str]
) -> None:
    script = write_script(tmp_path, "flaky_task.py", FLAKY_TASK)
    calls = tmp_path / "calls.log"
    done = run(script, env, str(calls))
    assert done.returncode == 0, done.stderr
    assert "result 40" in done.stdout
    assert calls.read_text().splitlines() == ["4", "4", "4"]
    progress = stored(tmp_path, "checkpoints", "flaky_task.py:flaky") / "progress.json"
    assert json.loads(progress.read_text()) == {"attempts": 3}
    assert "transient failure 1" in done.stderr and "transient failure 2" in done.stderr
