"""A task that fails at once, while the background imports still run, opens its session."""

from __future__ import annotations

from tests.session_fixture import Job

JOB = """
from interactive import vscode

@vscode(ide="none", port=0, control_port=0, debug_port=0)
def instant():
    raise RuntimeError("at once")

if __name__ == "__main__":
    instant()
"""


def test_instant_failure_races_no_import(job: Job) -> None:
    job.write("job.py", JOB)
    for _ in range(3):
        job.start().wait_state("waiting")
        assert job.api("POST", "/api/abort")[0] == 202
        assert job.wait_exit() == 1
        assert "RuntimeError: at once" in job.output() and "ImportError" not in job.output()
        (job.home / "session.json").unlink()
