"""flytekit's ``@task`` stacked over ``@vscode``: the interface is kept, a local run opens a
session on failure and resumes with the edited code (a real flytekit, in a child process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.session_fixture import Job

pytest.importorskip("flytekit")

EXAMPLE = Path(__file__).parent.parent / "examples" / "flyte" / "workflow.py"


def test_flyte_task_over_vscode_keeps_its_interface_and_resumes(job: Job, tmp_path: Path) -> None:
    source = EXAMPLE.read_text()
    job.write("workflow.py", source)
    record = job.start("workflow.py", env={"HOME": str(tmp_path)}).wait_state("waiting")
    assert record["task"] == "__main__.normalize"
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
