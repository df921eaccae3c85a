"""What a debugger attached to a waiting session sees, and that it never holds the session up.

It sees one thread, named after the task, stopped in the failed frame, and the task's frames
without podcode's own. The session's threads (the main thread waiting for Resume, the event
loop and its workers, the idle monitor, asyncio's wait for code-server) are neither listed nor
suspended: resuming while the debugger sits in the exception closes the session without the
timeouts of threads held by the debugger."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from interactive.base.context import current_task
from interactive.base.loop import LoopThread
from interactive.reaper.notify import in_thread
from interactive.session import postmortem
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


LOADER_JOB = """\
import threading, time
from interactive import vscode

ticks = [0]
stop = threading.Event()


def load():
    while not stop.is_set():
        ticks[0] += 1
        time.sleep(0.02)


loader = threading.Thread(target=load, name="loader")  # not a daemon: the end joins it
loader.start()


@vscode(port=0, control_port=0, debug_port=0, ide="none")
def middle(value):
    if value > 1:
        raise ValueError("too large")
    return value


if __name__ == "__main__":
    print("RESULT", middle(3), flush=True)
    before = ticks[0]
    time.sleep(0.5)
    print("LOADER RAN", ticks[0] > before, flush=True)
    stop.set()
    loader.join()
"""


@pytest.mark.parametrize("client_goes", ["stays", "vanishes"])
def test_threads_the_stop_suspended_run_again_after_resume(job: Job, client_goes: str) -> None:
    """The post-mortem stops "all threads": the task's own loader thread too. After Resume
    it runs again, whether the client is still attached or went away without a word;
    otherwise the resumed task would hang joining it."""
    job.write("job.py", LOADER_JOB)
    record = job.start().wait_state("waiting", timeout=120)
    client = DapClient(record["debug"]["host"], record["debug"]["port"])
    try:
        assert client.attach_and_stop()["allThreadsStopped"]
        assert "loader" in [t["name"] for t in client.request("threads")["threads"]]
        if client_goes == "vanishes":
            client.sock.close()
        job.write("job.py", LOADER_JOB.replace("value > 1", "value > 100"))
        assert job.api("POST", "/api/resume")[0] == 202
        assert job.wait_exit(timeout=60) == 0
    finally:
        client.close()
    assert "RESULT 3" in job.output()
    assert "LOADER RAN True" in job.output()


def _hidden(thread: threading.Thread) -> bool:
    """What debugpy reads: neither listed nor suspended nor traced."""
    return bool(getattr(thread, "is_pydev_daemon_thread", False)
                and getattr(thread, "pydev_do_not_trace", False))


def test_out_of_sight_hides_a_thread_while_inside_then_restores_it() -> None:
    thread = threading.Thread(target=lambda: None)
    thread.pydev_do_not_trace = False  # type: ignore[attr-defined]
    with postmortem.out_of_sight(thread):
        assert _hidden(thread)
    assert thread.pydev_do_not_trace is False  # type: ignore[attr-defined]
    assert not hasattr(thread, "is_pydev_daemon_thread")


def test_the_session_loop_its_workers_and_child_waits_are_service_threads() -> None:
    loop = LoopThread("podcode-test")
    try:
        async def spawn() -> list[threading.Thread]:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", "import time; time.sleep(1)")
            waits = [t for t in threading.enumerate() if t.name.startswith("asyncio-waitpid")]
            await proc.wait()
            return waits

        async def worker() -> threading.Thread:
            return await asyncio.to_thread(threading.current_thread)

        assert _hidden(loop._thread)
        assert _hidden(loop.call(worker(), 30))
        for wait in loop.call(spawn(), 30):  # none from Python 3.12 (a pidfd on the loop)
            assert _hidden(wait), wait.name
    finally:
        loop.stop()


async def test_mail_goes_out_on_a_service_thread() -> None:
    seen: list[threading.Thread] = []
    await in_thread(lambda message: seen.append(threading.current_thread()), EmailMessage())
    assert seen and seen[0].name == "podcode-mail" and _hidden(seen[0])


def test_the_presenter_is_named_after_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    served = threading.Event()
    monkeypatch.setattr(postmortem.PostMortem, "_serve", lambda self: served.set())
    presenter = postmortem.PostMortem()
    token = current_task.set("__main__.train")
    try:
        presenter.present(None)
    finally:
        current_task.reset(token)
    thread = presenter._thread
    assert thread is not None and served.wait(10)
    assert thread.name == "train"
    assert thread.pydev_do_not_trace  # type: ignore[attr-defined]  # traced only at the stop
    assert not getattr(thread, "is_pydev_daemon_thread", False)  # listed: it carries the stop


def test_a_debugger_still_attached_is_shown_the_next_failure(job: Job) -> None:
    """Resume with the debugger still in the exception; the task fails again: the same
    client stops in the new exception, with no new attach."""
    job.write("job.py", JOB.replace("poll_seconds=0.2", 'ide="none"'))
    record = job.start().wait_state("waiting")
    client = DapClient(record["debug"]["host"], record["debug"]["port"])
    try:
        first = client.attach_and_stop()
        assert first["description"] == "total too large: 12"
        job.write("job.py", JOB.replace("poll_seconds=0.2", 'ide="none"')
                  .replace("value * 2", "value * 3"))  # still too large: 18
        assert job.api("POST", "/api/resume")[0] == 202
        again = client.event("stopped")["body"]
        assert again["description"] == "total too large: 18"
        _, local = client.frame_locals(again["threadId"])
        assert local["total"] == "18"
    finally:
        client.close()
    assert job.api("POST", "/api/abort")[0] in (200, 202)
    assert job.wait_exit() != 0
