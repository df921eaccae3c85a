"""The debugger in the pod's own code-server, driven in Chromium as a person would: a task
fails, the IDE opens stopped in the failed frame with its locals with no click or key, the Debug
Console evaluates in that frame, a breakpoint set in the gutter stops "debug ... again with
captured inputs", the fix typed in the editor and Resume in the status bar finish the
workflow; code-server forwards no ports by itself. Screenshots of the stopped debugger go to
artifacts/ (``make screenshots`` copies the one the docs show)."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.browser import (
    ARTIFACTS,
    MARKS,
    MIDDLE_FIXED,
    MIDDLE_HELPERS,
    MIDDLE_JOB,
    VIEWPORT,
    chromium_page,
    log_in,
    run_command,
    stack_rows,
)
from tests.session_fixture import Job
from tests.waiting import eventually

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.codeserver, *MARKS]

JOB = MIDDLE_JOB
BREAK_LINE = 9  # total += scale(value)
RAISE_LINE = 11
SLOW_CLOSE = ("did not close within", "could not stop the IDE")
"""What the session logs when the debugger held its threads while it closed."""


async def _open(page: Any, name: str) -> Any:
    """Open ``name`` in the editor (quick open); its editor's view."""
    await page.keyboard.press("Control+P")
    await page.keyboard.type(name)
    await page.locator(".quick-input-list .monaco-list-row", has_text=name).first.wait_for()
    await page.keyboard.press("Enter")
    editor = page.locator(".editor-instance .monaco-editor").first
    await page.locator(".tab.active", has_text=name).wait_for()
    return editor


async def _toggle_breakpoint(page: Any, editor: Any, line: int) -> None:
    """Click the gutter left of line ``line``'s number, as a person sets a breakpoint."""
    number = editor.locator(".margin-view-overlays .line-numbers", has_text=re.compile(f"^{line}$"))
    box = await number.bounding_box()
    assert box is not None
    glyphs = await editor.locator(".margin-view-overlays").bounding_box()
    assert glyphs is not None
    x, y = glyphs["x"] + 8, box["y"] + box["height"] / 2
    await page.mouse.move(x, y)
    await page.mouse.click(x, y)


async def test_postmortem_breakpoint_fix_and_resume_in_the_pods_vscode(
    job: Job, code_server_binary: Path, tmp_path: Path
) -> None:
    job.write("helpers.py", MIDDLE_HELPERS)
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    assert job.proc is not None
    tree = [job.proc.pid] + [p.pid for p in psutil.Process(job.proc.pid).children(recursive=True)]
    ARTIFACTS.mkdir(exist_ok=True)
    listeners: list[socket.socket] = []
    async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                             timeout_ms=120_000) as page:
        try:
            await log_in(page, record)
            # New listening ports: code-server would forward them (in seconds) and say so.
            listeners.extend(socket.create_server(("127.0.0.1", 0)) for _ in range(25))

            # No click, no key: the companion starts the post-mortem attach by itself.
            failed_frame = page.locator(".debug-call-stack .monaco-list-row", has_text="middle")
            unsupported = page.get_by_text(re.compile("is not supported"))
            await failed_frame.or_(unsupported).first.wait_for()
            assert await unsupported.count() == 0, "code-server has no debugger for this type"
            stack = await stack_rows(page)
            assert stack[0].startswith(f"middle job.py {RAISE_LINE}:"), stack
            # Frames only: no thread is listed (not the waiting main thread, not podcode's).
            assert all(".py" in row for row in stack), stack
            assert not any(word in " ".join(stack) for word in ("podcode", "Thread", "asyncio"))
            total = page.locator(".debug-variables .monaco-list-row",
                                 has_text=re.compile(r"^total\s*=\s*12$"))
            await total.wait_for()  # the failed frame's locals, open without a click
            await page.screenshot(path=str(ARTIFACTS / "debugger-postmortem.png"))

            await page.locator(".repl-input-wrapper .monaco-editor").click()
            await page.keyboard.type("total * 2 + len(values)")
            await page.keyboard.press("Enter")
            await page.locator(".repl .monaco-list-row", has_text=re.compile(r"^27$")).wait_for()

            await page.keyboard.press("Shift+F5")  # detach: the session keeps waiting
            await failed_frame.wait_for(state="detached")

            editor = await _open(page, "job.py")
            await _toggle_breakpoint(page, editor, BREAK_LINE)
            await page.locator(".debug-breakpoints .monaco-list-row",
                               has_text=f"job.py{BREAK_LINE}").wait_for()
            await run_command(page, "Debug: Select and Start Debugging",
                           pick="podcode: debug middle again with captured inputs")
            await page.locator(".debug-call-stack .monaco-list-row",
                               has_text=f"job.py{BREAK_LINE}:").wait_for()
            await page.locator(".debug-variables .monaco-list-row",
                               has_text=re.compile(r"^value\s*=\s*1$")).wait_for()  # 1st item
            await page.screenshot(path=str(ARTIFACTS / "debugger-breakpoint.png"))
            await page.keyboard.press("Shift+F5")  # end the fresh process
            await page.locator(".debug-call-stack .monaco-list-row").first.wait_for(
                state="detached")
            await _toggle_breakpoint(page, editor, BREAK_LINE)  # done with it
            await page.locator(".debug-breakpoints .monaco-list-row",
                               has_text=f"job.py{BREAK_LINE}").wait_for(state="detached")

            helpers = await _open(page, "helpers.py")
            await helpers.locator(".view-line", has_text="return value * 2").click()
            await page.keyboard.press("End")
            await page.keyboard.press("Backspace")
            await page.keyboard.press("Backspace")
            await page.keyboard.press("Backspace")
            await page.keyboard.press("Backspace")
            await page.keyboard.press("Control+S")
            await eventually(lambda: (job.workspace / "helpers.py").read_text() == MIDDLE_FIXED,
                             timeout=60, poll=0.1)

            ports = page.locator('[id="status.forwardedPorts"]')
            assert await ports.get_attribute("aria-label") == "No Ports Forwarded"
            assert await page.get_by_text(re.compile("automatically forwarded")).count() == 0

            # Attached again (it stops in the exception again), Resume from the status bar.
            await run_command(page, "Debug: Select and Start Debugging",
                           pick="podcode: attach to failed middle (post-mortem)")
            await failed_frame.wait_for()
            await page.locator(".statusbar-item", has_text="podcode: waiting").click()
            await page.locator(".quick-input-list .monaco-list-row",
                               has_text="Resume workflow").first.click()
            assert job.wait_exit(timeout=30) == 0  # the session closed held by nothing
        except BaseException:
            await page.screenshot(path=str(ARTIFACTS / "debugger-failure.png"))
            raise
        finally:
            for listener in listeners:
                listener.close()
    output = job.output()
    assert "RESULT 6" in output  # (1 + 2 + 3) with the fixed helper
    assert not any(message in output for message in SLOW_CLOSE), output
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in tree[1:]):
        time.sleep(0.1)
    left = [pid for pid in tree[1:] if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"processes left after the session: {left}"


async def _stopped_in_the_failed_frame(page: Any, press: bool = False) -> None:
    """The failed frame and its locals: by itself in a window that opens, after F5 (the
    post-mortem configuration, selected first) in one that attached by itself before."""
    if press:
        await page.keyboard.press("F5")
    await page.locator(".debug-call-stack .monaco-list-row", has_text="middle").wait_for()
    await page.locator(".debug-variables .monaco-list-row",
                       has_text=re.compile(r"^total\s*=\s*12$")).wait_for()


@contextlib.asynccontextmanager
async def _stopped_in_chromium(
    job: Job, tmp_path: Path, failure: str
) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
    """The failing job's session waiting, and a Chromium page logged in to it and stopped
    in the failed frame by itself: ``(page, record)``. A block that fails leaves a
    screenshot ``failure`` in artifacts/; one that ends aborts the session."""
    job.write("helpers.py", MIDDLE_HELPERS)
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                             timeout_ms=120_000) as page:
        try:
            await log_in(page, record)
            await _stopped_in_the_failed_frame(page)
            yield page, record
        except BaseException:
            await page.screenshot(path=str(ARTIFACTS / failure))
            raise
    job.api("POST", "/api/abort")
    job.wait_exit()


@pytest.mark.slow
async def test_a_second_window_takes_over_the_post_mortem_and_the_first_can_again(
    job: Job, code_server_binary: Path, tmp_path: Path
) -> None:
    """A window left open with the debugger stopped holds debugpy's connection; a second
    window (or a reload) must still land in the frame, and so must the first after it."""
    async with _stopped_in_chromium(job, tmp_path, "reattach-failure.png") as (first, record):
        second = await first.context.new_page()
        await second.goto(record["code_server_url"])  # logged in: the same browser
        await second.locator(".statusbar-item", has_text="podcode: waiting").wait_for(
            timeout=240_000)
        await _stopped_in_the_failed_frame(second)
        await first.bring_to_front()
        await first.locator(".debug-call-stack .monaco-list-row",
                            has_text="middle").wait_for(state="detached")
        await _stopped_in_the_failed_frame(first, press=True)


@pytest.mark.slow
async def test_the_desktop_configuration_attaches_in_the_pods_code_server_too(
    job: Job, code_server_binary: Path, tmp_path: Path
) -> None:
    """A session that serves SSH writes a "debugpy" attach configuration for a desktop VS
    Code into the same launch.json. Picked in the pod's code-server, which has no Python
    Debugger extension, it lands in the failed frame too (the companion serves the type)
    instead of failing with "debug type not supported"."""
    failure = "desktop-configuration-failure.png"
    async with _stopped_in_chromium(job, tmp_path, failure) as (page, _):
        # stopped by the companion's own configuration: detach, then pick the desktop one
        await page.keyboard.press("Shift+F5")
        await page.locator(".debug-call-stack .monaco-list-row",
                           has_text="middle").wait_for(state="detached")
        await run_command(page, "Debug: Select and Start Debugging",
                          pick="desktop VS Code over SSH")
        await _stopped_in_the_failed_frame(page)
        assert not await page.locator(".notifications-toasts",
                                      has_text="not supported").count()
