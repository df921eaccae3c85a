"""Real sessions in child processes, real signals: nothing of a killed task keeps running or
keeps its secrets; two processes sharing a home each keep their own record and inputs."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from interactive.base.identity import SESSION_VARIABLE, session_id
from interactive.cli import Console, Exit, run
from tests.processes import marked_processes
from tests.session_fixture import Job
from tests.waiting import wait_until

JOB = """
from interactive import vscode

@vscode({options})
def middle(values):
    total = sum(values)
    if total > 10:
        raise ValueError(f"total too large: {{total}}")
    return total

if __name__ == "__main__":
    print("RESULT", middle({values}))
"""




def own_record(job: Job) -> dict[str, Any] | None:
    """The job's own record in ``sessions/`` (the home's session.json may be another's)."""
    assert job.proc is not None
    for path in job.home.glob(f"sessions/{job.proc.pid}-*/session.json"):
        try:
            return json.loads(path.read_text())  # type: ignore[no-any-return]
        except ValueError:
            return None
    return None


def cli(home: Path, *argv: str) -> tuple[int, str, str]:
    console = Console(out=io.StringIO(), err=io.StringIO(),
                      environ={**os.environ, "PODCODE_HOME": str(home)}, clock=time.time)
    code = run(list(argv), console)
    return code, console.out.getvalue(), console.err.getvalue()  # type: ignore[attr-defined]


def waiting_with_code_server(job: Job, code_server_binary: Path) -> dict[str, Any]:
    """The job's task failed; its session waits with a real code-server: the record."""
    job.write("job.py", JOB.format(options="port=0, control_port=0, debug_port=0",
                                   values=[4, 5, 6]))
    job.start(env={"PODCODE_CODE_SERVER_PATH": str(code_server_binary)})
    return job.wait_state("waiting", timeout=120)


@pytest.mark.codeserver
def test_sigkill_of_the_task_leaves_no_process_and_no_secret(
    job: Job, code_server_binary: Path
) -> None:
    record = waiting_with_code_server(job, code_server_binary)
    assert record["code_server_url"] and record["password"]
    assert job.proc is not None
    session = session_id(record["pid"], record["started"])
    tree = wait_until(lambda: marked_processes(session), "code-server's processes")
    # A terminal of code-server: a session of its own, code-server's environment.
    terminal = subprocess.Popen(["sleep", "600"], env=tree[0].environ(), start_new_session=True)
    try:
        job.proc.send_signal(signal.SIGKILL)
        job.proc.wait(10)
        wait_until(lambda: not marked_processes(session), "no process of the session", 15)
        assert terminal.wait(5) == -signal.SIGTERM
    finally:
        if terminal.poll() is None:
            terminal.kill()
            terminal.wait()
    with pytest.raises(OSError):
        urllib.request.urlopen(record["code_server_url"], timeout=2)  # noqa: S310
    for path in (job.home / "session.json", job.home / "sessions" / session / "session.json"):
        left = wait_until(lambda p=path: json.loads(p.read_text()).get("process_gone_at")
                          and json.loads(p.read_text()), f"{path} marked")
        assert left["state"] == "waiting" and left["token"] is None and left["password"] is None
    assert not (job.workspace / ".vscode" / "podcode-session.json").exists()
    code, out, err = cli(job.home, "status")
    assert code == Exit.NOT_FOUND
    assert "waiting (process gone)" in out and "ValueError: total too large: 15" in out
    assert record["token"] not in out + err and record["password"] not in out + err


def test_two_processes_sharing_a_home_each_keep_their_session(tmp_path: Path,
                                                              podcode_home: Path) -> None:
    jobs = []
    for name, values in (("a", [1, 2, 9]), ("b", [7, 8, 9])):
        workspace = tmp_path / name
        workspace.mkdir()
        job = Job(workspace, podcode_home)
        options = 'ide="none", port=0, control_port=0, debug_port=0'
        job.write("job.py", JOB.format(options=options, values=values))
        jobs.append(job.start())
    try:
        _run_both(podcode_home, *jobs)
    finally:
        for job in jobs:
            job.stop()


def _run_both(home: Path, first: Job, second: Job) -> None:
    records = [wait_until(lambda j=job: (r := own_record(j)) and r["state"] == "waiting" and r,
                          "both sessions waiting") for job in (first, second)]
    a, b = records
    assert a["control_url"] != b["control_url"] and a["token"] != b["token"]
    assert a["inputs"] != b["inputs"]
    assert json.loads((home / "session.json").read_text())["pid"] in (a["pid"], b["pid"])
    code, _, err = cli(home, "status")
    assert code == Exit.USAGE and f"pid {a['pid']}" in err and f"pid {b['pid']}" in err
    code, out, _ = cli(home, "status", "--pid", str(b["pid"]))
    assert code == Exit.OK and f"(pid {b['pid']})" in out

    # "debug again" from a session's VS Code loads that session's inputs, not the newest
    [rerun] = (first.workspace / ".vscode" / "podcode").glob("rerun_*.py")
    for record, total in ((a, 12), (b, 24)):
        env = {**os.environ, "PODCODE_HOME": str(home), "PODCODE_ENABLE": "0",
               SESSION_VARIABLE: session_id(record["pid"], record["started"])}
        done = subprocess.run([sys.executable, str(rerun)], cwd=first.workspace, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert f"total too large: {total}" in done.stderr, done.stderr

    assert cli(home, "abort", "--pid", str(a["pid"]))[0] == Exit.OK
    assert first.wait_exit() == 1
    code, out, _ = cli(home, "status")  # one session waits now: no selector needed
    assert code == Exit.OK and "job.py:middle" in out
    second.write("job.py", (second.workspace / "job.py").read_text().replace("> 10", "> 100"))
    assert cli(home, "resume")[0] == Exit.OK
    assert second.wait_exit() == 0 and "RESULT 24" in second.output()
    assert Path(a["inputs"]).exists()  # kept: that session was aborted
    assert not Path(b["inputs"]).exists()  # removed: that task is done
    assert not Path(b["inputs"]).parents[1].exists()


@pytest.mark.codeserver
@pytest.mark.slow
def test_code_server_killed_is_seen_and_restarted_with_its_url_in_the_record(
    job: Job, code_server_binary: Path
) -> None:
    record = waiting_with_code_server(job, code_server_binary)
    assert job.api("GET", "/api/status")[1]["ide"] == "up"
    first = record["code_server_url"]
    session = session_id(record["pid"], record["started"])
    launcher = min(wait_until(lambda: marked_processes(session), "code-server"),
                   key=lambda p: p.create_time())
    launcher.kill()  # code-server crashes
    wait_until(lambda: job.api("GET", "/api/status")[1]["ide"] == "restarting"
               or (job.session() or {}).get("code_server_url") != first, "the crash seen", 30)

    def serving_again() -> str | None:
        url = (job.session() or {}).get("code_server_url")
        if job.api("GET", "/api/status")[1]["ide"] != "up" or not url:
            return None
        try:
            urllib.request.urlopen(f"{url}healthz", timeout=2)  # noqa: S310
        except OSError:
            return None
        return str(url)

    assert wait_until(serving_again, "code-server serving again", 90)
    code, out, _ = cli(job.home, "status")
    assert code == Exit.OK and "IDE:      up" in out
    job.api("POST", "/api/abort")
    job.wait_exit()
