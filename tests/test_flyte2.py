"""Flyte 2 (the ``flyte`` SDK): ``@vscode`` in either order with ``@env.task``, sync and
async tasks, fan-out with ``asyncio.gather``, run as its users do (``flyte run --local``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.session_fixture import Job
from tests.waiting import wait_until

flyte = pytest.importorskip("flyte")

WORKFLOW = """\
import asyncio
import flyte
from interactive import vscode

env = flyte.TaskEnvironment(name="podcode_demo")
SETTINGS = dict(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)


@env.task
@vscode(**SETTINGS)
async def square(x: int) -> int:
    await asyncio.sleep(0)
    return x * x // (x - 2)


@vscode(**SETTINGS)
@env.task
def double(x: int) -> int:
    return x * 2 // (x - 4)


@env.task
async def main(n: int) -> list[int]:
    first, *squares = await asyncio.gather(double.aio(4), *(square(i) for i in range(n)))
    return [first, *await asyncio.gather(*(double.aio(s) for s in squares))]
"""
FIXED = WORKFLOW.replace("x * x // (x - 2)", "x * x").replace("x * 2 // (x - 4)", "x * 2")


def waiting(home: Path) -> list[dict[str, Any]]:
    found = []
    for path in (home / "sessions").glob("*/session.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if record.get("state") == "waiting":
            found.append(record)
    return found


def resume(record: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(record["control_url"] + "/api/resume", method="POST")
    request.add_header("Authorization", f"Bearer {record['token']}")
    with urllib.request.urlopen(request, b"", timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def test_vscode_over_a_flyte2_task_keeps_it_a_task() -> None:
    from flyte._task import AsyncFunctionTaskTemplate

    from interactive import vscode

    env = flyte.TaskEnvironment(name="podcode_shape")

    def add(x: int) -> int:
        return x + 1

    task = vscode(env.task(add))
    assert isinstance(task, AsyncFunctionTaskTemplate)  # Flyte still finds and runs it
    assert task.func.__podcode_task__ is add  # type: ignore[attr-defined]
    assert task.forward(1) == 2


@pytest.mark.slow
def test_flyte_run_local_fails_in_both_orders_and_resumes_to_the_fixed_result(
    job: Job,
) -> None:
    job.write("wf.py", WORKFLOW)
    flyte_cli = str(Path(sys.executable).with_name("flyte"))
    job.start(script=flyte_cli, args=["run", "--local", "wf.py", "main", "--n", "3"])
    both = wait_until(lambda: w if len(w := waiting(job.home)) == 2 else None,
                      "a session for the sync and one for the async task", timeout=120)
    assert {r["task"] for r in both} == {"wf.square", "wf.double"}  # imported as module wf
    job.write("wf.py", FIXED)
    for record in both:
        assert resume(record)["patched"], record["task"]  # through Flyte's .func
    assert job.wait_exit(timeout=120) == 0, job.output()
    # double(4) and square(2) fixed; square(0) and (1) had run with the old code
    assert "[8, 0, -2, 8]" in job.output(), job.output()


IO_WORKFLOW = """\
import flyte
import pandas as pd
from flyte.io import DataFrame, File
from interactive import vscode

env = flyte.TaskEnvironment(name="podcode_io")


@env.task
async def make() -> tuple[File, DataFrame]:
    return (await File.from_local("count.txt"),
            DataFrame.from_df(pd.DataFrame({"a": [1, 2, 3]})))


@env.task
@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
async def use(f: File, df: DataFrame) -> int:
    async with f.open("rb") as handle:
        count = int(bytes(await handle.read()).decode())
    frame = await df.open(pd.DataFrame).all()
    return count * 100 + int(frame["a"].sum()) // 0


@env.task
async def main() -> int:
    f, df = await make()
    return await use(f, df)
"""


@pytest.mark.slow
def test_file_and_dataframe_inputs_debug_again_and_resume(job: Job) -> None:
    pytest.importorskip("pyarrow")
    job.write("count.txt", "7")
    job.write("wf.py", IO_WORKFLOW)
    flyte_cli = str(Path(sys.executable).with_name("flyte"))
    job.start(script=flyte_cli, args=["run", "--local", "wf.py", "main"])
    [record] = wait_until(lambda: waiting(job.home) or None, "the session of use", timeout=120)
    job.write("wf.py", IO_WORKFLOW.replace("// 0", "// 1"))

    # "debug again", as VS Code runs it: a process of its own, outside the run's Flyte
    # context; the captured File and DataFrame are read through a local one
    launch = json.loads((job.workspace / ".vscode" / "launch.json").read_text())
    [again] = [c for c in launch["configurations"] if c["request"] == "launch"
               and "program" in c]
    done = subprocess.run([again["python"], again["program"]], cwd=again["cwd"],
                          env={**os.environ, **again["env"]}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert "wf.use returned 706" in done.stdout, done.stdout + done.stderr

    assert resume(record)["patched"]
    assert job.wait_exit(timeout=120) == 0, job.output()
    assert "706" in job.output(), job.output()
