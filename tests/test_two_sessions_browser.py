"""Two coroutines of one process fail at once: each gets a session and a code-server of its
own, and the one debugger of the process shows both failed frames, each as a thread named
after its task. Driven in Chromium as a person would: attach from the first session's IDE,
see both stops, look at each frame's locals, resume each session from its own IDE."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser import ARTIFACTS, MARKS, VIEWPORT, chromium_page, log_in, stack_rows
from tests.session_fixture import Job
from tests.waiting import wait_until

playwright_api = pytest.importorskip("playwright.async_api")
pytestmark = [pytest.mark.codeserver, pytest.mark.slow, *MARKS]

JOB = """\
import asyncio
from interactive import vscode

SETTINGS = dict(port=0, control_port=0, debug_port=0)


@vscode(**SETTINGS)
async def left(values):
    total = sum(values)
    await asyncio.sleep(0)
    return total // (total - 3)


@vscode(**SETTINGS)
async def right(values):
    scaled = [v * 10 for v in values]
    await asyncio.sleep(0)
    return max(scaled) // (len(scaled) - 1)


async def main():
    print("RESULT", await asyncio.gather(left([1, 2]), right([4])))


asyncio.run(main())
"""
FIXED = JOB.replace("(total - 3)", "(total - 2)").replace("(len(scaled) - 1)", "len(scaled)")


def waiting(home: Path) -> dict[str, dict[str, Any]]:
    """The waiting sessions' records by task."""
    found = {}
    for path in (home / "sessions").glob("*/session.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if record.get("state") == "waiting" and record.get("code_server_url"):
            found[record["task"]] = record
    return found


def _thread(page: Any, name: str) -> Any:
    return page.locator(".debug-call-stack .monaco-list-row:has(.thread)", has_text=name)


def _frame_row(page: Any, task: str) -> Any:
    return page.locator(".debug-call-stack .monaco-list-row:has(.stack-frame)",
                        has_text=f"{task}job.py")


async def _frame_of(page: Any, task: str) -> None:
    """Select the failed frame of ``task``'s thread (expanding the thread if need be)."""
    frame = _frame_row(page, task)
    if not await frame.is_visible():
        await _thread(page, task).click()
    await frame.click()


async def _variable(page: Any, pattern: str) -> None:
    await page.locator(".debug-variables .monaco-list-row",
                       has_text=re.compile(pattern)).wait_for()


async def _resume_here(page: Any) -> None:
    """Resume from the status bar's menu. The menu is opened and clicked again when it did not
    open or closed before the click landed: on a loaded machine the workbench may drop a click
    while it redraws, and a debug view that comes into focus closes an open quick pick."""
    menu = page.locator(".quick-input-list .monaco-list-row", has_text="Resume workflow")
    for attempt in range(3):
        await page.locator(".statusbar-item", has_text="podcode: waiting").click()
        try:
            await menu.first.wait_for(timeout=20_000)
            await menu.first.click(timeout=20_000)
            return
        except playwright_api.TimeoutError:
            if attempt == 2:
                raise


async def test_one_debugger_shows_both_failed_coroutines_and_each_ide_resumes_its_own(
    job: Job, code_server_binary: Path, tmp_path: Path
) -> None:
    job.write("job.py", JOB)
    job.start()
    both = wait_until(lambda: w if len(w := waiting(job.home)) == 2 else None,
                      "both sessions waiting with their code-server", timeout=180)
    left, right = both["job.py:left"], both["job.py:right"]
    assert left["code_server_url"] != right["code_server_url"]
    assert left["debug"] == right["debug"]  # one debugger per process
    ARTIFACTS.mkdir(exist_ok=True)
    async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                             timeout_ms=120_000) as page:
        try:
            await log_in(page, left)
            # no click: the companion starts this session's post-mortem attach by itself
            # one debugger for the process: both failed coroutines are stopped, each listed
            # as a thread named after its task (the one that stopped last is shown first)
            for task in ("left", "right"):
                await _thread(page, task).wait_for()
            stack = "\n".join(await stack_rows(page))
            assert "asyncio" not in stack and "podcode" not in stack, stack
            await page.screenshot(path=str(ARTIFACTS / "two-sessions-debugger.png"))
            for task, local in (("left", r"^total\s*=\s*3$"), ("right", r"^scaled\s*=\s*\[40\]")):
                await _frame_of(page, task)
                await _variable(page, local)  # the frame of that coroutine, with its locals

            job.write("job.py", FIXED)
            await _resume_here(page)  # this IDE's session: left (its code-server then ends)
            wait_until(lambda: "job.py:left" not in waiting(job.home), "left resumed")
            assert "job.py:right" in waiting(job.home)  # the other one still waits

            await log_in(page, right)
            # its post-mortem attaches by itself; one thread left, so its frame shows alone
            await _frame_row(page, "right").wait_for()
            await _resume_here(page)
            assert job.wait_exit(timeout=60) == 0, job.output()
        except BaseException:
            await page.screenshot(path=str(ARTIFACTS / "two-sessions-failure.png"))
            raise
    assert "RESULT [3, 40]" in job.output(), job.output()
