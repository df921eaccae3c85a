"""The coding agent's door: ``podcode mcp`` driven by the MCP SDK's own client over stdio,
against a real session (a task that failed in a child process, no IDE).

The task fails with a DataFrame of a million rows and a list of a million items among its
locals. ``run()`` returns:

- ``mcp_describe_failure_ms``: one ``describe_failure`` call, from the client's request
  to its answer (status, frames, the failing frame's locals summarised, bounded).
  Baseline, in the same run: the same three control-API calls made directly with
  :class:`~interactive.base.control_client.ControlClient` (no MCP, no second process).
  Goal: at most 300 ms.
- ``mcp_evaluate_roundtrip_ms``: one ``evaluate`` of ``1 + 1`` in the failing frame.
  Baseline: ``ControlClient.evaluate`` of the same. Goal: at most 100 ms.
- ``mcp_describe_failure_bytes``: the size of that answer (UTF-8). Goal: at most 32 KiB.

Each run is the mean of :data:`CALLS` calls.

- ``agent_fix_to_result_s``: a failed task fixed by the scripted agent (the MCP SDK's client,
  a fresh ``podcode mcp --local`` started and initialised beforehand, as an agent's client
  keeps its servers), from its first call to the answer of its last: ``list_sessions``,
  ``describe_failure``, ``evaluate`` of ``total`` in the failing frame, ``apply_diff``
  (the ``raise`` line made a ``return``), ``resume`` waiting for the outcome, ``returned``.
  The task (:data:`FIX_JOB`) is :mod:`benchmarks.bench_frame`'s, with code-server, and runs
  1.5 s again when resumed. Each step's median is in ``steps_s``. Baseline, in the same
  run, interleaved: a person's path in Chromium against the same task in its own session:
  ``time_to_frame_s`` as ``bench_frame`` measures it (from the exception to ``total = 12``
  in the Variables view, through the one-time login link, no click), then the fix typed in
  the editor (Quick Open ``job.py:LINE``, the line selected and retyped, Ctrl+S), then
  ``podcode: Resume workflow`` from the command palette, until the task has returned (it
  writes the time). Neither side counts thinking: the agent's calls follow each other at
  once, and the browser is driven at Playwright's speed. The person's end is the task's
  own return, before anyone could see it; the agent's, the moment ``resume`` tells it.
  Goal: at most the baseline.
- ``agent_exception_to_result_s``: the same agent's path counted as the person's is, from
  the task's exception (it writes the time) to ``resume``'s answer: the session opening
  and the first call made as soon as it waits are counted too. Baseline: the same person's
  path. Goal: at most the baseline.
- ``person_time_to_frame_s``: the first part of that baseline alone (``bench_frame``'s
  ``time_to_frame_s``, measured in this run). No goal of its own here.

Run: ``python benchmarks/run.py bench_agent`` (the fix figures need code-server, Debian's
chromium and playwright, as ``bench_frame`` does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from benchmarks import bench_frame  # noqa: E402
from benchmarks.harness import RUNS, figure  # noqa: E402
from interactive.base.control_client import ControlClient  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

CALLS = 5
JOB = textwrap.dedent("""
    import pandas as pd

    from interactive import vscode


    @vscode(ide="none", port=0, control_port=0, debug_port=0)
    def total(df):
        many = list(range(1_000_000))
        return df["prise"].sum() + len(many)


    if __name__ == "__main__":
        n = 1_000_000
        total(pd.DataFrame({"price": [1.5] * n, "qty": list(range(n)), "name": ["a"] * n}))
""")


def _start(folder: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any], Path]:
    workspace, home = folder / "ws", folder / "home"
    workspace.mkdir()
    (workspace / "job.py").write_text(JOB)
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "job.py"], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            record = json.loads((home / "session.json").read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("state") == "waiting":
            return proc, record, home
        if proc.poll() is not None:
            raise RuntimeError("the task ended before its session opened")
        time.sleep(0.1)
    raise RuntimeError("the session did not open within 120 s")


def _direct_describe(client: ControlClient) -> None:
    client.status()
    failure = client.frames()
    client.frame_locals(failure.get("failed_frame") or 0)


async def _measure(home: Path, client: ControlClient) -> dict[str, list[float]]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "interactive.cli", "mcp", "--local"],
                                   env={"PODCODE_HOME": str(home), "PYTHONPATH": str(ROOT)},
                                   cwd=str(ROOT))
    samples: dict[str, list[float]] = {k: [] for k in (
        "describe", "describe_base", "evaluate", "evaluate_base", "bytes")}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("list_sessions", {})  # the session reached once

        async def mcp_call(tool: str, arguments: dict[str, Any]) -> float:
            started = time.perf_counter()
            for _ in range(CALLS):
                result = await session.call_tool(tool, arguments)
                assert not result.is_error, result
            elapsed = (time.perf_counter() - started) / CALLS * 1000
            if tool == "describe_failure":
                text = getattr(result.content[0], "text", "")
                assert '"df"' in text and '"many"' in text, text
                samples["bytes"].append(len(text.encode()))
            return elapsed

        def direct(call: Any) -> float:
            started = time.perf_counter()
            for _ in range(CALLS):
                call()
            return (time.perf_counter() - started) / CALLS * 1000

        frame = client.frames().get("failed_frame") or 0
        for index in range(RUNS):  # A B B A ...: neither always first
            pairs: list[tuple[str, Callable[[], Awaitable[float]]]] = [
                ("describe", lambda: mcp_call("describe_failure", {})),
                ("evaluate", lambda: mcp_call("evaluate", {"code": "1 + 1"})),
            ]
            for name, ours in pairs:
                base: Callable[[], float] = (
                    (lambda: direct(lambda: _direct_describe(client))) if name == "describe"
                    else (lambda: direct(lambda: client.evaluate("1 + 1", frame))))
                if index % 2 == 0:
                    samples[name].append(await ours())
                    samples[f"{name}_base"].append(base())
                else:
                    samples[f"{name}_base"].append(base())
                    samples[name].append(await ours())
    return samples


FIX_JOB = bench_frame.JOB.replace(
    "    task([1, 2, 3])\n",
    "    value = task([1, 2, 3])\n"
    '    with open("returned_at", "w") as out:\n'
    "        out.write(repr(time.time()))\n"
    '    print("RESULT", value)\n',
)
"""``bench_frame``'s task (it writes when it raised), which also writes when it returned."""
RAISE = '    raise ValueError(f"total too large: {total}")'
FIXED = "    return total"
RAISE_LINE = FIX_JOB.splitlines().index(RAISE) + 1
FIX = f"--- a/job.py\n+++ b/job.py\n@@ -{RAISE_LINE} +{RAISE_LINE} @@\n-{RAISE}\n+{FIXED}\n"
"""The agent's fix: the ``raise`` line made a ``return``."""
TOTAL = r"^total\s*=\s*12$"
T = TypeVar("T")


def _start_fix_job(workspace: Path, home: Path) -> subprocess.Popen[bytes]:
    workspace.mkdir(parents=True)
    (workspace / "job.py").write_text(FIX_JOB)
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home),
           "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "job.py"], cwd=workspace, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _returned(workspace: Path) -> float:
    """When the resumed task returned (it writes the time), once it has."""
    path = workspace / "returned_at"
    wait_until(lambda: path.exists() and path.read_text(), "the resumed task's result",
               bench_frame.TIMEOUT_S, bench_frame.POLL_S)
    return float(path.read_text())


def _in_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a loop of its own thread (Playwright's sync API holds this
    thread's)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _agent_fixes(home: Path) -> dict[str, float]:
    """The scripted agent's calls, each timed; ``total``: the first call to the last answer."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "interactive.cli", "mcp", "--local"],
                                   env={"PODCODE_HOME": str(home), "PYTHONPATH": str(ROOT)},
                                   cwd=str(ROOT))
    steps: dict[str, float] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def step(tool: str, **arguments: Any) -> str:
            started = time.perf_counter()
            result = await session.call_tool(tool, arguments)
            steps[tool] = time.perf_counter() - started
            text = "".join(getattr(block, "text", "") for block in result.content)
            if result.is_error:
                raise RuntimeError(f"{tool}: {text}")
            return text

        started = time.perf_counter()
        [listed] = json.loads(await step("list_sessions"))["sessions"]
        session_id = listed["session"]
        failure = json.loads(await step("describe_failure", session=session_id))
        assert failure["exception"]["type"] == "ValueError", failure
        assert await step("evaluate", session=session_id, code="total") == "12"
        await step("apply_diff", session=session_id, diff=FIX)
        resumed = json.loads(await step("resume", session=session_id, wait_seconds=120))
        steps["total"] = time.perf_counter() - started
        steps["answered_at"] = time.time()
        if resumed["outcome"] != "returned":
            raise RuntimeError(f"the resumed task did not return: {resumed}")
    return steps


def agent_path(root: Path) -> dict[str, float]:
    """The task fails in a session of its own; the scripted agent fixes and resumes it."""
    workspace, home = root / "agent-ws", root / "agent-home"
    proc = _start_fix_job(workspace, home)
    try:
        bench_frame.waiting_session(home, proc)
        raised = float((workspace / "raised_at").read_text())  # the re-run writes it again
        steps = _in_thread(_agent_fixes(home))
        _returned(workspace)
        steps["from_exception"] = steps.pop("answered_at") - raised
        return steps
    finally:
        bench_frame._stop(proc)


def _edit_in_browser(page: Any, workspace: Path) -> None:
    """The ``raise`` line retyped as a ``return`` in the editor, and saved."""
    page.keyboard.press("Control+P")
    page.locator(".quick-input-widget input").first.wait_for()
    page.keyboard.type(f"job.py:{RAISE_LINE}")
    page.locator(".quick-input-list .monaco-list-row", has_text="job.py").first.wait_for()
    page.keyboard.press("Enter")
    page.locator(".monaco-editor .view-line", has_text="raise ValueError").first.wait_for()
    page.keyboard.press("End")
    page.keyboard.press("Shift+Home")
    page.keyboard.type(FIXED.strip())
    page.keyboard.press("Control+S")
    wait_until(lambda: FIXED in (workspace / "job.py").read_text().splitlines(),
               "the edit saved", bench_frame.TIMEOUT_S, bench_frame.POLL_S)


def _resume_in_browser(page: Any) -> None:
    page.keyboard.press("F1")
    page.keyboard.type("podcode: Resume workflow")
    page.locator(".quick-input-list .monaco-list-row",
                 has_text="Resume workflow").first.wait_for()
    page.keyboard.press("Enter")


def person_path(root: Path, browser: Any) -> tuple[float, float]:
    """The task fails in a session of its own; in Chromium, a person's path to its result:
    (time to the frame, time to the result), both from the exception."""
    workspace, home = root / "person-ws", root / "person-home"
    proc = _start_fix_job(workspace, home)
    context = browser.new_context(viewport=bench_frame.VIEWPORT)
    try:
        record = bench_frame.waiting_session(home, proc)
        page = bench_frame._watching(context, bench_frame.VARIABLE_ROW, TOTAL)
        page.goto(bench_frame._login_link(record))
        shown = bench_frame._shown_at(page, bench_frame.VARIABLE_ROW, TOTAL)
        raised = float((workspace / "raised_at").read_text())
        _edit_in_browser(page, workspace)
        _resume_in_browser(page)
        return shown - raised, _returned(workspace) - raised
    finally:
        context.close()
        bench_frame._stop(proc)


def fix_to_result(rounds: int = RUNS) -> list[dict[str, Any]]:
    """``agent_fix_to_result_s`` and its baseline, interleaved round by round."""
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM, CHROMIUM_ARGS

    agent: list[dict[str, float]] = []
    person: list[tuple[float, float]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for index in range(rounds):
                root = Path(tempfile.mkdtemp(prefix="podcode-bench-agent-fix-"))
                try:
                    if index % 2 == 0:
                        agent.append(agent_path(root))
                        person.append(person_path(root, browser))
                    else:
                        person.append(person_path(root, browser))
                        agent.append(agent_path(root))
                finally:
                    shutil.rmtree(root, ignore_errors=True)
        finally:
            browser.close()
    steps = {tool: round(statistics.median(s[tool] for s in agent), 3)
             for tool in agent[0] if tool not in ("total", "from_exception")}
    return [
        figure("agent_fix_to_result_s", [s["total"] for s in agent], unit="s", digits=3,
               baseline=[total for _, total in person],
               goal="<= baseline (a person's path in Chromium: time_to_frame_s, the fix typed "
                    "in the editor, Resume from the command palette, to the task's return)",
               steps_s=steps,
               note="the task runs 1.5 s again when resumed, on both sides; no thinking "
                    "counted on either"),
        figure("agent_exception_to_result_s", [s["from_exception"] for s in agent], unit="s",
               digits=3, baseline=[total for _, total in person],
               goal="<= baseline (the same person's path, both from the task's exception)",
               note="the agent's first call as soon as the session waits"),
        figure("person_time_to_frame_s", [frame for frame, _ in person], unit="s", digits=3,
               goal="none here (bench_frame's time_to_frame_s, measured in this run as the "
                    "first part of agent_fix_to_result_s's baseline)"),
    ]


def run() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        proc, record, home = _start(Path(folder))
        try:
            client = ControlClient(record["control_url"].replace("0.0.0.0", "127.0.0.1"),
                                   record["token"])
            samples = asyncio.run(_measure(home, client))
        finally:
            proc.kill()
            proc.wait(30)
    return [
        figure("mcp_describe_failure_ms", samples["describe"], unit="ms", digits=1,
               baseline=samples["describe_base"],
               goal="<= 300 (baseline: the same control-API calls, no MCP)"),
        figure("mcp_evaluate_roundtrip_ms", samples["evaluate"], unit="ms", digits=1,
               baseline=samples["evaluate_base"],
               goal="<= 100 (baseline: ControlClient.evaluate, no MCP)"),
        figure("mcp_describe_failure_bytes", samples["bytes"], unit="bytes", digits=0,
               goal="<= 32768", note="a DataFrame of 1M rows and a 1M-item list in scope"),
        *fix_to_result(),
    ]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
