"""From a one-time login link to the failed frame in Chromium, as a person clicks the link
``podcode attach`` prints: no password typed, no click, the frame's locals shown; the same
link opened again is refused."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.browser import MARKS, VIEWPORT, chromium_page
from tests.session_fixture import Job

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.codeserver, *MARKS]

JOB = """\
from interactive import vscode


@vscode(port=0, control_port=0, debug_port=0)
def middle(values):
    total = sum(value * 2 for value in values)
    raise ValueError(f"total too large: {total}")


if __name__ == "__main__":
    middle([1, 2, 3])
"""


async def test_a_login_link_lands_in_the_failed_frame_with_no_typing(
    job: Job, code_server_binary: Path, tmp_path: Path
) -> None:
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    _, issued = job.api("POST", "/api/login-link")
    link = (f"{record['control_url']}/login/{issued['nonce']}?"
            + urlencode({"ide": record["code_server_url"]}))
    async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                             timeout_ms=120_000) as page:
        await page.goto(link)
        await page.wait_for_selector(".monaco-workbench", timeout=240_000)
        assert await page.locator("input[type=password]").count() == 0
        await page.locator(".debug-call-stack .monaco-list-row", has_text="middle").wait_for(
            timeout=240_000)
        await page.locator(".debug-variables .monaco-list-row",
                           has_text=re.compile(r"^total\s*=\s*12$")).wait_for()
        spent = await page.context.new_page()
        answer = await spent.goto(link)
        assert answer is not None and answer.status == 404
        assert "used or has expired" in await spent.content()
    job.api("POST", "/api/abort")
    job.wait_exit()
