"""What a debugger attached to a waiting session sees, and that it never holds the session up.

It sees one thread, named after the task, stopped in the failed frame, and the task's frames
without podcode's own. The session's threads (the main thread waiting for Resume, the event
loop and its workers, the idle monitor, asyncio's wait for code-server) are neither listed nor
suspended: resuming while the debugger sits in the exception closes the session without the
timeouts of threads held by the debugger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.dap import DapClient
from tests.session_fixture import Job

JOB = """\
from interactive import vscode


@vscode(port=0, control_port=0, debug_port=0, poll_seconds=0.2)
def middle(values):
    total = 0
    for value in values:
        total += value * 2
    if total > 10:
        raise ValueError(f"total too large: {total}")
    return total


if __name__ == "__main__":
    print("RESULT", middle([1, 2, 3]))
"""
SLOW_CLOSE = ("did not close within", "could not stop the IDE")


def _attach_configuration(workspace: Path) -> dict[str, Any]:
    launch = json.loads((workspace / ".vscode" / "launch.json").read_text())
    return next(c for c in launch["configurations"] if c["request"] == "attach")


@pytest.mark.codeserver
def test_the_debugger_sees_the_task_only_and_never_holds_the_session(
    job: Job, code_server_binary: Path
) -> None:
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    assert record["code_server_url"]  # code-server runs: asyncio waits for it on a thread
    config = _attach_configuration(job.workspace)
    client = DapClient(record["debug"]["host"], record["debug"]["port"])
    try:
        client.request("initialize", adapterID=config["type"], clientID="vscode",
                       pathFormat="path", linesStartAt1=True, columnsStartAt1=True)
        attach = client.send("attach", **{k: v for k, v in config.items() if k != "type"})
        client.event("initialized")
        client.request("configurationDone")
        client.response(attach)
        stopped = client.event("stopped")["body"]
        assert stopped["reason"] == "exception"
        threads = client.request("threads")["threads"]
        assert [t["name"] for t in threads] == ["middle"]  # the task; no session thread
        assert threads[0]["id"] == stopped["threadId"]
        frames, local = client.frame_locals(stopped["threadId"])
        assert [f["name"].split(" ")[0] for f in frames] == ["middle", "<module>"]  # no podcode
        assert local["total"] == "12"

        job.write("job.py", JOB.replace("total > 10", "total > 100"))
        assert job.api("POST", "/api/resume")[0] == 202  # the debugger still in the exception
        assert job.wait_exit(timeout=60) == 0
    finally:
        client.close()
    output = job.output()
    assert "RESULT 12" in output
    assert not any(message in output for message in SLOW_CLOSE), output
