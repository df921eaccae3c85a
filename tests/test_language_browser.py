"""Python language intelligence in the pod's code-server, driven in Chromium as a person
would, against the real code-server and the real basedpyright (installed with podcode, no
download): while the debugger is stopped in the failed frame, a red squiggle on a call with
the wrong number of arguments, the language hover of a helper (signature and docstring;
under the mouse the debugger's hover comes first, "Show or Focus Hover" gives the
language's), Go to Definition (F12) into another module of the workspace, and completion
of a module's members."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from interactive.doors.language import server_module
from tests.browser import (
    ARTIFACTS,
    MARKS,
    MIDDLE_JOB,
    VIEWPORT,
    chromium_page,
    log_in,
    run_command,
)
from tests.session_fixture import Job

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [
    pytest.mark.codeserver, pytest.mark.slow, *MARKS,
    pytest.mark.skipif(server_module() is None, reason="needs basedpyright (podcode[lsp])"),
    pytest.mark.skipif(
        not (Path(__file__).resolve().parents[1] / "vscode_config" / "extension" / "lib" /
             "languageclient.js").exists(),
        reason="needs the companion's language client (scripts/build-companion-client.sh)"),
]

HELPERS = '''\
def scale(value: int) -> int:
    """Double a value for the report."""
    return value * 2
'''
JOB = "import helpers\n" + MIDDLE_JOB.replace("\n\n@vscode", """

def unused() -> int:
    return scale(1, 2)


@vscode""")


def _token(editor: Any, line: str, word: str) -> Any:
    """The span of ``word`` on the editor line that holds ``line``."""
    return editor.locator(".view-line", has_text=line).locator(
        "span span", has_text=re.compile(f"^{word}$")).first


async def _completion(page: Any, label: str, tries: int = 6) -> None:
    """Ctrl+Space until the suggest widget lists ``label``: as a person asks again when the
    list came back empty while the language server was busy (a loaded machine)."""
    row = page.locator(".suggest-widget .monaco-list-row", has_text=label)
    said: list[str] = []
    for _ in range(tries):
        await page.keyboard.press("Control+Space")
        try:
            await row.wait_for(timeout=20_000)
            return
        except playwright_api.TimeoutError:
            said = await page.locator(".suggest-widget").all_inner_texts()
            await page.keyboard.press("Escape")
    raise AssertionError(f"no completion {label!r} after {tries} asks; the widget said {said}")


async def test_hover_definition_completion_and_a_diagnostic_beside_the_stopped_debugger(
    job: Job, code_server_binary: Path, tmp_path: Path
) -> None:
    job.write("helpers.py", HELPERS)
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    ARTIFACTS.mkdir(exist_ok=True)
    async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                             timeout_ms=120_000) as page:
        try:
            await log_in(page, record)
            await page.locator(".debug-call-stack .monaco-list-row", has_text="middle").wait_for()
            editor = page.locator(".editor-instance .monaco-editor").first
            await page.locator(".tab.active", has_text="job.py").wait_for()

            # A call with the wrong number of arguments is underlined and listed.
            await editor.locator(".squiggly-error").first.wait_for()
            await page.keyboard.press("Control+Shift+M")
            await page.locator(".markers-panel .monaco-list-row",
                               has_text=re.compile("Expected 1 positional argument")).wait_for()

            # The language hover, with the debugger stopped: its own hover comes first
            # under the mouse; "Show or Focus Hover" shows the language's at the cursor.
            call = _token(editor, "total += scale(value)", "scale")
            await call.scroll_into_view_if_needed()
            await call.hover()
            await page.get_by_text("Hold Alt key to switch to editor language hover").wait_for()
            await page.mouse.move(5, 300)
            await call.click()
            await run_command(page, "Show or Focus Hover")
            hover = page.locator(".monaco-hover", has_text="Double a value for the report")
            await hover.wait_for()
            assert "(value: int) -> int" in await hover.inner_text()
            assert await page.locator(".debug-call-stack .monaco-list-row",
                                      has_text="middle").count() == 1  # still stopped
            await page.screenshot(path=str(ARTIFACTS / "language-hover.png"))
            await page.keyboard.press("Escape")

            # Go to Definition into another module of the workspace.
            await call.click()
            await page.keyboard.press("F12")
            await page.locator(".tab.active", has_text="helpers.py").wait_for()

            # Completion of a module's members (typed, not saved).
            await page.locator(".tab", has_text="job.py").click()
            await page.locator(".tab.active", has_text="job.py").wait_for()
            await call.click()  # the keys go to the text, as after a person's click in it
            await page.keyboard.press("Control+End")
            await page.keyboard.press("Enter")
            await page.keyboard.type("helpers.sc")
            await editor.locator(".view-line", has_text="helpers.sc").wait_for()
            await _completion(page, "scale")
            await page.keyboard.press("Escape")
        except BaseException:
            await page.screenshot(path=str(ARTIFACTS / "language-failure.png"))
            raise
    job.api("POST", "/api/abort")
    assert job.wait_exit(timeout=60) != 0
