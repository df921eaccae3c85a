"""``async def`` tasks in real asyncio programs: gather, cancellation, several sessions at
once, the event loop never held, and a plain task on a running loop said to be wrong."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from interactive import vscode
from tests.dap import DapClient
from tests.session_fixture import Job
from tests.waiting import wait_until

GATHER = """\
import asyncio, json, sys, time
from pathlib import Path
from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
async def scale(values: list, factor: int) -> list:
    await asyncio.sleep(0)
    values.append(0)  # changes its input before it fails
    return [v / factor for v in values]


async def ticker(stop: asyncio.Event) -> None:
    ticks = 0
    while not stop.is_set():
        await asyncio.sleep(0.01)
        ticks += 1
        Path("ticks").write_text(str(ticks))


async def main() -> None:
    stop = asyncio.Event()
    ticking = asyncio.create_task(ticker(stop))
    results = await asyncio.gather(scale([2, 4], 0), scale([6], 0), scale([8], 2))
    stop.set()
    await ticking
    print("RESULT", json.dumps(results))


asyncio.run(main())
"""


def records(home: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted((home / "sessions").glob("*/session.json")):
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:
            continue  # being replaced
    return found


def waiting(home: Path, count: int) -> list[dict[str, Any]]:
    now = [r for r in records(home) if r.get("state") == "waiting"]
    return now if len(now) == count else []


def edited_while_waiting(job: Job, program: str) -> None:
    """``program`` started; once its session waits, its ``1 // 0`` fixed in place."""
    job.write("job.py", program)
    job.start()
    wait_until(lambda: waiting(job.home, 1), "a waiting session", timeout=90)
    job.write("job.py", program.replace("1 // 0", "1 // 1"))


def edits_saved(job: Job) -> bool:
    """Whether the fix (``1 // 1``) is among the edits saved to the store."""
    saved = [p for p in (job.home / "store" / "edits").rglob("*") if p.is_file()]
    return any("1 // 1" in p.read_text(errors="replace") for p in saved)


def ticks(job: Job) -> int:
    try:
        return int((job.workspace / "ticks").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def podcode(home: Path, *argv: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "interactive.cli", *argv], capture_output=True,
                          env={**os.environ, "PODCODE_HOME": str(home)}, text=True, timeout=60,
                          check=False)
    return done.returncode, done.stdout, done.stderr


def resume(record: dict[str, Any]) -> int:
    import urllib.request

    request = urllib.request.Request(record["control_url"] + "/api/resume", method="POST")
    request.add_header("Authorization", f"Bearer {record['token']}")
    with urllib.request.urlopen(request, b"", timeout=10) as response:
        return response.status


@pytest.mark.slow
def test_two_coroutines_fail_at_once_each_gets_its_session_and_the_loop_goes_on(
    job: Job,
) -> None:
    job.write("job.py", GATHER)
    job.start()
    both = wait_until(lambda: waiting(job.home, 2), "two waiting sessions", timeout=90)
    assert len({r["control_url"] for r in both}) == 2  # keyed by session, not by process
    assert {r["task"] for r in both} == {"job.py:scale"}
    assert len({r["inputs"] for r in both}) == 2
    before = ticks(job)
    wait_until(lambda: ticks(job) > before + 20, "the ticker to go on while both wait")

    job.write("job.py", GATHER.replace("v / factor", "v / (factor or 1)"))
    # the CLI, as the engineer uses it: one task, one process, two sessions: by their id
    code, _, listed = podcode(job.home, "resume", "--task", "scale")
    assert code == 2 and "--session ID" in listed, listed
    for record in both:
        assert record["session"] in listed
        code, _, err = podcode(job.home, "resume", "--task", "scale", "--session",
                               record["session"])
        assert code == 0, err
    assert job.wait_exit(timeout=60) == 0, job.output()
    # each resumed on its own inputs as at the call, not on what the failure left
    assert 'RESULT [[2.0, 4.0, 0.0], [6.0, 0.0], [4.0, 0.0]]' in job.output()


CANCEL = """\
import asyncio
from pathlib import Path
from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
async def broken() -> int:
    return 1 // 0


async def main() -> None:
    task = asyncio.create_task(broken())
    while not Path("cancel").exists():
        await asyncio.sleep(0.05)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print("CANCELLED")


asyncio.run(main())
"""


@pytest.mark.slow
def test_cancelling_the_awaiting_task_ends_its_session_with_the_edits_saved(job: Job) -> None:
    edited_while_waiting(job, CANCEL)
    (job.workspace / "cancel").touch()
    assert job.wait_exit(timeout=60) == 0, job.output()
    output = job.output()
    assert "CANCELLED" in output
    assert "was cancelled while its session waited; your edits are saved in" in output
    assert [r["state"] for r in records(job.home)] == ["failed"]


TIMEOUT = """\
import asyncio
from pathlib import Path
from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
async def broken() -> int:
    return 1 // 0


async def expire(deadline: asyncio.Timeout) -> None:
    while not Path("expire").exists():
        await asyncio.sleep(0.05)
    deadline.reschedule(asyncio.get_running_loop().time())  # the deadline is now


async def main() -> None:
    try:
        async with asyncio.timeout(None) as deadline:
            watcher = asyncio.create_task(expire(deadline))
            await broken()
    except TimeoutError:
        await watcher
        print("TIMED OUT")


asyncio.run(main())
"""


@pytest.mark.slow
def test_a_timeout_while_the_session_waits_ends_it_with_the_edits_saved(job: Job) -> None:
    edited_while_waiting(job, TIMEOUT)
    (job.workspace / "expire").touch()
    assert job.wait_exit(timeout=60) == 0, job.output()
    output = job.output()
    assert "TIMED OUT" in output  # the caller's timeout, as without podcode
    assert "was cancelled while its session waited; your edits are saved in" in output
    assert [r["state"] for r in records(job.home)] == ["failed"]


SWALLOWED = """\
import asyncio
from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
async def broken() -> int:
    return 1 // 0


async def main() -> None:  # as Flyte 2's controller does: every error becomes the task's
    try:
        await broken()
    except BaseException as exc:
        print("CAUGHT", type(exc).__name__, flush=True)
    await asyncio.sleep(3600)


asyncio.run(main())
"""


@pytest.mark.slow
def test_sigterm_ends_the_process_even_when_a_framework_catches_system_exit(job: Job) -> None:
    edited_while_waiting(job, SWALLOWED)
    assert job.proc is not None
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait_exit(timeout=60) == 143, job.output()
    output = job.output()
    assert "CAUGHT SystemExit" in output and "ending the process now" in output
    assert edits_saved(job), output


SIGTERM_IN_THREAD = """\
import threading
from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
def broken() -> int:
    return 1 // 0


worker = threading.Thread(target=broken)  # as a framework runs a sync task
worker.start()
worker.join()
"""


@pytest.mark.slow
def test_sigterm_saves_the_edits_of_a_session_waiting_in_another_thread(job: Job) -> None:
    edited_while_waiting(job, SIGTERM_IN_THREAD)
    assert job.proc is not None
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait_exit(timeout=60) == 143, job.output()
    assert edits_saved(job), job.output()


TAKES_SIGTERM = """\
import os, signal, threading, time


def takes_sigterm() -> None:
    \"\"\"The kernel hands a signal sent to the process to any thread that does not block
    it (one that starts a thread at that moment may take it first): this one does.\"\"\"
    while not os.path.exists("go"):
        time.sleep(0.05)
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    time.sleep(600)


threading.Thread(target=takes_sigterm, daemon=True).start()
"""


def test_a_sigterm_another_thread_took_still_ends_a_session_waiting_off_the_main_thread(
    job: Job,
) -> None:
    """The main thread, blocked in ``join()``, never runs Python's handler: the SIGTERM
    that another thread took is passed on at once, the edits saved, the status 143."""
    program = SIGTERM_IN_THREAD.replace("\n\n\n@vscode", f"\n{TAKES_SIGTERM}\n\n@vscode")
    assert "takes_sigterm" in program
    edited_while_waiting(job, program)
    (job.workspace / "go").touch()
    assert job.wait_exit(timeout=60) == 143, job.output()
    assert edits_saved(job), job.output()


def test_a_sigterm_another_thread_took_keeps_its_default_action_while_no_call_runs(
    job: Job,
) -> None:
    job.write("job.py", TAKES_SIGTERM + """
from interactive import vscode


@vscode(ide="none")
def task() -> int:
    return 1


task()
sleeper = threading.Thread(target=time.sleep, args=(600,), daemon=True)
sleeper.start()
print("READY", flush=True)
sleeper.join()  # the main thread blocked in C
""")
    job.start()
    wait_until(lambda: "READY" in job.output(), "the task to have run")
    (job.workspace / "go").touch()
    assert job.wait_exit(timeout=30) == -signal.SIGTERM, job.output()  # as without podcode


def test_sigterm_keeps_its_default_action_while_no_decorated_call_runs(job: Job) -> None:
    job.write("job.py", """\
        import time
        from interactive import vscode

        @vscode(ide="none")
        def task() -> int:
            return 1

        task()
        print("READY", flush=True)
        time.sleep(60)
        """)
    job.start()
    wait_until(lambda: "READY" in job.output(), "the task to have run")
    assert job.proc is not None
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait_exit(timeout=10) == -signal.SIGTERM  # ended at once, as without podcode


def test_cancellation_and_interrupts_never_open_a_session(
    monkeypatch: pytest.MonkeyPatch, podcode_home: Path
) -> None:
    monkeypatch.setenv("PODCODE_ENABLE", "1")

    @vscode(ide="none")
    async def stopped(kind: type[BaseException]) -> None:
        raise kind()

    for kind in (asyncio.CancelledError, KeyboardInterrupt):
        with pytest.raises(kind):
            asyncio.run(stopped(kind))
    assert not (podcode_home / "sessions").exists()


def test_a_plain_task_failing_on_a_running_loop_says_why_it_opens_no_session(
    monkeypatch: pytest.MonkeyPatch, podcode_home: Path
) -> None:
    monkeypatch.setenv("PODCODE_ENABLE", "1")

    @vscode(ide="none")
    def helper() -> int:
        return 1 // 0

    async def caller() -> int:
        return helper()

    with pytest.raises(ZeroDivisionError) as failure:
        asyncio.run(caller())
    assert "put @vscode on the async def" in "".join(failure.value.__notes__)
    assert not (podcode_home / "sessions").exists()


POSTMORTEM = """\
import asyncio
from pathlib import Path
from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
async def first(values: list) -> int:
    total = sum(values)
    await asyncio.sleep(0)
    raise ValueError(f"first: {total}")


@vscode(ide="none", port=0, control_port=0, debug_port=0, poll_seconds=0.2)
async def second(name: str) -> int:
    await asyncio.sleep(0)
    raise KeyError(name)


async def ticker() -> None:
    ticks = 0
    while True:
        await asyncio.sleep(0.01)
        ticks += 1
        Path("ticks").write_text(str(ticks))


async def main() -> None:
    ticking = asyncio.create_task(ticker())
    print("RESULT", await asyncio.gather(first([1, 2]), second("lr")))
    ticking.cancel()


asyncio.run(main())
"""


@pytest.mark.slow
def test_one_debugger_shows_both_waiting_coroutines_in_their_frames(job: Job) -> None:
    job.write("job.py", POSTMORTEM)
    job.start()
    both = wait_until(lambda: waiting(job.home, 2), "two waiting sessions", timeout=90)
    debug = {(r["debug"]["host"], r["debug"]["port"]) for r in both}
    assert len(debug) == 1  # one debugpy per process, shared by its sessions
    client = DapClient(*debug.pop())
    try:
        client.attach_and_stop()
        def listed() -> list[dict[str, Any]]:
            threads: list[dict[str, Any]] = client.request("threads")["threads"]
            return threads if len(threads) == 2 else []

        threads = wait_until(listed, "both presenters listed")
        assert sorted(t["name"] for t in threads) == ["first", "second"]  # not the loop's
        seen = {}
        for thread in threads:
            frames = client.request("stackTrace", threadId=thread["id"])["stackFrames"]
            seen[thread["name"]] = [f["name"].split(" ")[0] for f in frames]
        assert "first" in seen["first"] and "second" in seen["second"]  # where each raised
        before = ticks(job)  # the client sits in an exception: the other coroutines go on
        wait_until(lambda: ticks(job) > before + 20, "the loop to go on under the debugger")
    finally:
        client.close()
    job.write("job.py", POSTMORTEM.replace('raise ValueError(f"first: {total}")', "return total")
              .replace("raise KeyError(name)", "return len(name)"))
    for record in both:
        assert resume(record) == 202
    assert job.wait_exit(timeout=60) == 0, job.output()
    assert "RESULT [3, 2]" in job.output()
