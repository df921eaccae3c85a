"""The notebook of a real session (a failing job in a child process), through its control
API as the companion calls it: cells in the failed frame, the inputs as at the call, the
task run again in a new process (failing, then fixed), an interrupt of a running cell, and
a resume from a cell that ends the job with the fixed result and removes the notebook."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.session_fixture import Job

pytestmark = pytest.mark.slow

HELPERS = "def scale(value):\n    return value * 2\n"
FIXED = "def scale(value):\n    return value\n"
JOB = """\
from interactive import vscode
from helpers import scale


@vscode(port=0, control_port=0, debug_port=0, ide="none")
def middle(values):
    total = 0
    for value in values:
        total += scale(value)
    values.append(total)  # changed in place: the captured inputs are as at the call
    if total > 10:
        raise ValueError(f"total too large: {total}")
    return total


if __name__ == "__main__":
    print("RESULT", middle([1, 2, 3]))
"""
HERE = "from interactive.doors.notebook import here\n"


def call(record: dict[str, Any], path: str, body: Any = None, timeout: float = 120) -> Any:
    request = urllib.request.Request(
        record["control_url"] + path, method="POST", data=json.dumps(body or {}).encode(),
        headers={"Authorization": f"Bearer {record['token']}",
                 "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def cell(record: dict[str, Any], code: str) -> dict[str, Any]:
    return dict(call(record, "/api/notebook/execute", {"code": code}))


def text(result: dict[str, Any]) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                   for o in result["outputs"])


def test_a_sessions_notebook_from_inputs_to_resume(job: Job) -> None:
    job.write("helpers.py", HELPERS)
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    opened = call(record, "/api/notebook/open")
    notebook = Path(opened["path"])
    assert notebook.parent == job.workspace / ".vscode" / "podcode" and notebook.exists()

    assert text(cell(record, "total, values")) == "(12, [1, 2, 3, 12])"  # the frame
    assert text(cell(record, f"{HERE}here.inputs()")) == "(([1, 2, 3],), {})"  # the call

    failing = cell(record, "here.run_again()")
    assert "ValueError: total too large: 12" in text(failing)
    assert "exited with status 1" in text(failing)
    job.write("helpers.py", FIXED)
    fixed = text(cell(record, "here.run_again()"))
    assert "job.py:middle returned 6" in fixed and "exited with status 0" in fixed

    answers: list[dict[str, Any]] = []
    running = threading.Thread(
        target=lambda: answers.append(cell(record, "n = 0\nwhile True:\n    n += 1")))
    running.start()
    while call(record, "/api/notebook/interrupt")["result"] == "idle":
        pass  # until the loop runs
    running.join(60)
    assert answers and answers[0]["outputs"][0]["ename"] == "KeyboardInterrupt"
    assert job.session()["state"] == "waiting"  # type: ignore[index]

    resumed = cell(record, "here.resume()")
    assert resumed["ok"] and "helpers.scale" in text(resumed)
    assert job.wait_exit(timeout=60) == 0
    assert "RESULT 6" in job.output()
    assert not notebook.exists()  # removed with the session's .vscode files
