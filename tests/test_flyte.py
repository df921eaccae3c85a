"""flytekit's ``@task`` stacked over ``@vscode``: the interface is kept, a local run opens a
session on failure and resumes with the edited code (a real flytekit, in a child process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.session_fixture import Job

pytest.importorskip("flytekit")

EXAMPLE = Path(__file__).parent.parent / "examples" / "flyte" / "workflow.py"


def test_flyte_task_over_vscode_keeps_its_interface_and_resumes(job: Job, tmp_path: Path) -> None:
    source = EXAMPLE.read_text()
    job.write("workflow.py", source)
    record = job.start("workflow.py", env={"HOME": str(tmp_path)}).wait_state("waiting")
    assert record["task"] == "workflow.py:normalize"
    assert record["error"].startswith("ZeroDivisionError")
    interface = next(line for line in job.output().splitlines() if line.startswith("INTERFACE"))
    assert interface.startswith("INTERFACE {'values': list[float]} ")
    assert interface.endswith(".normalize")
    job.write("workflow.py", source.replace("(total - total)", "total"))
    assert job.api("POST", "/api/resume")[0] == 202
    assert job.wait_exit(120) == 0, job.output()
    out = job.output()
    assert "RESULT normalized 4 values, sum 1.00" in out
    assert out.count("INTERFACE") == 1  # the script's main block did not run again


def test_pyflyte_run_of_a_local_workflow_resumes_with_the_fix(job: Job, tmp_path: Path) -> None:
    """How Flyte users run locally: ``pyflyte run wf.py pipeline`` loads the file under a
    module name of its own, which re-importing cannot find; patching in place can."""
    source = EXAMPLE.read_text().replace('@vscode(ide="none")', "@vscode(ide=\"none\", port=0)")
    job.write("wf.py", source)
    pyflyte = Path(sys.executable).with_name("pyflyte")
    job.start(str(pyflyte), env={"HOME": str(tmp_path)}, args=["run", "wf.py", "pipeline"])
    # pyflyte is a Python script: the fixture runs it with this interpreter
    record = job.wait_state("waiting", timeout=120)
    assert record["error"].startswith("ZeroDivisionError")
    job.write("wf.py", source.replace("(total - total)", "total"))
    status, body = job.api("POST", "/api/resume")
    assert status == 202, body
    assert body["patched"] and body["patched"][0].endswith("normalize")
    assert job.wait_exit(120) == 0, job.output()
    assert "normalized 4 values, sum 1.00" in job.output()
