"""The whole story in a real browser: a task fails, code-server opens with the session,
the engineer logs in, fixes the source, presses "Resume workflow", the workflow finishes."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from tests.browser import ARTIFACTS, MARKS, chromium_page
from tests.session_fixture import Job

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.codeserver, *MARKS]

HELPERS = "def scale(value):\n    return value * 2\n"
FIXED = "def scale(value):\n    return value\n"
JOB = """
from interactive import vscode
from helpers import scale

@vscode(port=0, control_port=0, debug_port=0)
def middle(values):
    total = sum(scale(v) for v in values)
    if total > 10:
        raise ValueError(f"total too large: {total}")
    return total

if __name__ == "__main__":
    print("RESULT", middle([1, 2, 3]))
"""


def listeners(pids: list[int]) -> set[str]:
    found = set()
    for conn in psutil.net_connections("inet"):
        if conn.pid in pids and conn.status == psutil.CONN_LISTEN:
            found.add(conn.laddr.ip)
    return found


async def test_fail_login_fix_resume_in_chromium(
    job: Job, code_server_binary: Path, tmp_path: Path
) -> None:
    job.write("helpers.py", HELPERS)
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    assert record["code_server_url"] and record["password"]
    assert job.proc is not None
    tree = [job.proc.pid] + [p.pid for p in psutil.Process(job.proc.pid).children(recursive=True)]
    assert listeners(tree) == {"127.0.0.1"}  # nothing binds a non-loopback address
    async with chromium_page(tmp_path / "chromium-profile", viewport={"width": 1400, "height": 900},
                             timeout_ms=60_000) as page:
        await page.goto(record["code_server_url"])
        await page.fill("input[type=password]", "wrong-" + record["password"])
        await page.click("input[type=submit], button[type=submit]")
        await page.wait_for_selector("text=Incorrect password")
        await page.fill("input[type=password]", record["password"])
        await page.click("input[type=submit], button[type=submit]")
        await page.wait_for_selector(".monaco-workbench")
        explorer = page.locator(".explorer-folders-view")
        await explorer.get_by_text("job.py", exact=True).wait_for()
        await explorer.get_by_text("helpers.py", exact=True).wait_for()
        item = page.locator(".statusbar-item", has_text="podcode: waiting")
        await item.wait_for()
        assert "cleanup in" in await item.inner_text()
        # the post-mortem attaches by itself; its debug view takes the focus when it opens,
        # which would close a command palette opened before it: wait for it, as a person does
        await page.locator(".debug-call-stack .monaco-list-row:has(.stack-frame)",
                           has_text="middle").first.wait_for()

        job.write("helpers.py", FIXED)  # the engineer's fix
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "e2e-session.png"))
        await page.keyboard.press("F1")
        await page.keyboard.type("podcode: Resume workflow")
        await page.locator(".quick-input-list .monaco-list-row",
                           has_text="Resume workflow").first.wait_for()
        await page.keyboard.press("Enter")
        assert job.wait_exit(timeout=60) == 0
    assert "RESULT 6" in job.output()  # (1 + 2 + 3) with the fixed helper
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in tree[1:]):
        time.sleep(0.1)
    left = [pid for pid in tree[1:] if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"processes left after the session: {left}"
