"""End to end: a real failing task in a child process, a real debugpy, real HTTP."""

from __future__ import annotations

import json
import socket

import pytest

from tests.dap import DapClient
from tests.session_fixture import Job

HELPERS = """
def scale(value):
    return value * 2
"""

JOB = """
from interactive import vscode
from helpers import scale

@vscode(ide="none", port=0, control_port=0, debug_port=0)
def middle(values, factor=3):
    total = sum(scale(v) for v in values)
    if total > 10:
        raise ValueError(f"total too large: {total}")
    return total * factor

if __name__ == "__main__":
    print("MAIN BLOCK RAN")
    print("RESULT", middle([1, 2, 3], factor=4))
"""


def start(job: Job) -> dict:
    job.write("helpers.py", HELPERS)
    job.write("job.py", JOB)
    return job.start().wait_state("waiting")


def test_post_mortem_stops_in_failed_frame_with_locals_twice(job: Job) -> None:
    record = start(job)
    for _ in range(2):  # a second attach works after the first client disconnects
        client = DapClient(record["debug"]["host"], record["debug"]["port"])
        try:
            stopped = client.attach_and_stop()
            assert stopped["reason"] == "exception"
            frames, local = client.frame_locals(stopped["threadId"])
            assert frames[0]["name"] == "middle"
            assert local["total"] == "12"
            client.request("continue", threadId=stopped["threadId"])
        finally:
            client.close()
    assert job.api("GET", "/api/status")[1]["state"] == "waiting"


def test_resume_runs_edited_helper_and_returns_value_to_caller(job: Job) -> None:
    start(job)
    job.write("helpers.py", "def scale(value):\n    return value\n")
    status, body = job.api("POST", "/api/resume")
    assert (status, body["state"]) == (202, "resuming")
    assert job.wait_exit() == 0
    out = job.output()
    assert "RESULT 24" in out  # (1+2+3) * 4 with the edited helper
    assert out.count("MAIN BLOCK RAN") == 1
    assert job.session()["state"] == "done"
    assert "token" not in job.session()


def test_task_in_main_script_is_reloaded_and_fails_again_then_succeeds(job: Job) -> None:
    start(job)
    job.write("job.py", JOB.replace("total > 10", "total > 11"))  # still fails: 12 > 11
    assert job.api("POST", "/api/resume")[0] == 202
    record = job.wait_state("waiting", attempt=2)
    assert record["error"] == "ValueError: total too large: 12"
    job.write("job.py", JOB.replace("total > 10", "total > 100"))
    assert job.api("POST", "/api/resume")[0] == 202
    assert job.wait_exit() == 0
    assert "RESULT 48" in job.output()


def test_abort_raises_original_exception(job: Job) -> None:
    start(job)
    assert job.api("POST", "/api/abort")[0] == 202
    assert job.wait_exit() == 1
    assert "ValueError: total too large: 12" in job.output()


def test_api_needs_token_and_healthz_is_open(job: Job) -> None:
    start(job)
    assert job.api("GET", "/api/status", token=None)[0] == 401
    assert job.api("GET", "/api/status", token="wrong")[0] == 401
    assert job.api("POST", "/api/resume", token="wrong")[0] == 401
    assert job.api("GET", "/healthz", token=None) == (200, {"ok": True})
    status, body = job.api("GET", "/api/status")
    assert status == 200
    assert set(body) >= {
        "state",
        "task",
        "error",
        "attempt",
        "idle_seconds",
        "reap_at",
        "owner",
        "gpu_utilization",
    }
    assert body["task"] == "job.py:middle"


def test_resume_while_running_is_refused(job: Job) -> None:
    job.write("helpers.py", HELPERS)
    job.write(
        "job.py",
        JOB.replace('"RESULT"', '"RESULT"').replace(
            "    return total * factor", "    import time; time.sleep(3)\n    return total * factor"
        ),
    )
    job.start().wait_state("waiting")
    job.write("helpers.py", "def scale(value):\n    return value\n")
    assert job.api("POST", "/api/resume")[0] == 202
    job.wait_state("running")
    status, body = job.api("POST", "/api/resume")
    assert status == 409 and "running" in body["error"]
    assert job.wait_exit() == 0


def test_session_file_is_private_and_complete(job: Job) -> None:
    record = start(job)
    mode = (job.home / "session.json").stat().st_mode & 0o777
    assert mode == 0o600
    for key in (
        "state",
        "task",
        "error",
        "workspace",
        "control_url",
        "token",
        "debug",
        "code_server_url",
        "password",
        "pid",
    ):
        assert key in record
    launch = json.loads((job.workspace / ".vscode" / "launch.json").read_text())
    names = [c["name"] for c in launch["configurations"]]
    assert any("post-mortem" in name for name in names)
    assert (job.workspace / ".vscode" / "podcode-session.json").stat().st_mode & 0o777 == 0o600


def test_ports_in_use_move_to_the_next_free_port(job: Job) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        job.write("helpers.py", HELPERS)
        job.write("job.py", JOB.replace("control_port=0", f"control_port={port}"))
        record = job.start().wait_state("waiting")
        used = int(record["control_url"].rsplit(":", 1)[1])
        assert used != port and port < used <= port + 20
        assert f"control_port {port} on 127.0.0.1 is in use" in job.output()
    finally:
        busy.close()


def test_no_code_server_keeps_the_session_without_ide(job: Job, tmp_path) -> None:
    job.write("helpers.py", HELPERS)
    job.write("job.py", JOB.replace('ide="none", ', ""))
    missing = tmp_path / "no-such-code-server"
    record = job.start(env={"PODCODE_CODE_SERVER_PATH": str(missing)}).wait_state("waiting")
    assert record["code_server_url"] is None and record["password"] is None
    notes = job.api("GET", "/api/status")[1]["notes"]
    assert any("no IDE (code-server) for this session" in note and str(missing) in note
               for note in notes)
    assert job.api("POST", "/api/abort")[0] == 202
    assert job.wait_exit() == 1


@pytest.mark.slow
def test_the_newest_client_takes_over_the_post_mortem(job: Job) -> None:
    """A window left open holds debugpy's connection: a second window (a reload, desktop
    VS Code) still stops in the failed frame; the first is told its session ended; and the
    first can come back the same way."""
    record = start(job)
    host, port = record["debug"]["host"], record["debug"]["port"]
    first = DapClient(host, port)
    second = again = None
    try:
        first.attach_and_stop()
        second = DapClient(host, port)
        stopped = second.attach_and_stop()  # the first never disconnected
        frames, local = second.frame_locals(stopped["threadId"])
        assert frames[0]["name"] == "middle" and local["total"] == "12"
        first.event("terminated")
        again = DapClient(host, port)
        stopped = again.attach_and_stop()
        assert again.frame_locals(stopped["threadId"])[1]["total"] == "12"
        second.event("terminated")  # type: ignore[union-attr]
    finally:
        for client in (first, second, again):
            if client is not None:
                client.close()
    assert job.api("GET", "/api/status")[1]["state"] == "waiting"
