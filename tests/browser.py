"""What every browser test shares: Debian's chromium, its flags, a page in a fresh profile,
where screenshots go, and the marks that skip a test where chromium or code-server is
missing, and the network namespace (loopback only) the offline tests run in."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.async_api import ViewportSize

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
"""Without the background-networking flags chromium keeps dialling hosts it cannot reach."""
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
"""Screenshots of the tests (git-ignored); ``make screenshots`` copies the docs' ones."""
MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium"),
]
"""Add ``pytest.mark.codeserver`` where the test also runs code-server."""
VIEWPORT: ViewportSize = {"width": 1100, "height": 640}
"""Small enough that a screenshot fits in the docs as it is."""
IN_CELL = """() => {
  const active = document.activeElement;
  return Boolean(active && active.closest('.code-cell-row') && active.closest('.monaco-editor'));
}"""
"""The keyboard's focus is in a notebook code cell's editor (``page.wait_for_function``):
what a person types goes into the cell."""
MIDDLE_JOB = """\
from interactive import vscode
from helpers import scale


@vscode(port=0, control_port=0, debug_port=0)
def middle(values):
    total = 0
    for value in values:
        total += scale(value)
    if total > 10:
        raise ValueError(f"total too large: {total}")
    return total


if __name__ == "__main__":
    print("RESULT", middle([1, 2, 3]))
"""
"""A task that fails in ``middle`` (line 11) with ``total = 12`` in its frame, after calling
``helpers.scale`` (line 9): what the browser tests debug."""
MIDDLE_HELPERS = "def scale(value):\n    return value * 2\n"
"""The ``helpers.py`` :data:`MIDDLE_JOB` imports: ``scale`` doubles, which is the bug."""
MIDDLE_FIXED = "def scale(value):\n    return value\n"
"""``helpers.py`` as the engineer fixes it: ``middle([1, 2, 3])`` then returns 6."""


async def log_in(page: Any, record: dict[str, Any]) -> None:
    """Log in to the code-server of the session ``record`` and wait for its companion."""
    await page.goto(record["code_server_url"])
    await page.fill("input[type=password]", record["password"])
    await page.click("input[type=submit], button[type=submit]")
    await page.wait_for_selector(".monaco-workbench")
    # The companion is up (on a busy machine the extension host takes a while).
    await page.locator(".statusbar-item", has_text="podcode: waiting").wait_for(timeout=240_000)


async def in_outputs(page: Any, selector: str, timeout: float = 120, count: int = 1) -> Any:
    """The first element matching ``selector`` in the notebook's outputs (they render in
    nested webview frames), once ``count`` of them are there in one frame."""
    from playwright.async_api import Error as PlaywrightError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for frame in page.frames:
            if frame == page.main_frame:
                continue  # the workbench itself: its own images and tables are not outputs
            try:
                found = frame.locator(selector)
                if await found.count() >= count:
                    return found.first
            except PlaywrightError:
                continue  # a frame that went away as we looked
        await page.wait_for_timeout(200)
    raise AssertionError(f"no {selector!r} in the notebook's outputs")


async def stack_rows(page: Any) -> list[str]:
    """The Call Stack view's rows (whitespace folded), once VS Code has loaded all their
    frames (it shows the top one first, with "Load More Stack Frames")."""
    await page.locator(".debug-call-stack .monaco-list-row",
                       has_text="Load More Stack Frames").wait_for(state="detached")
    rows = await page.locator(".debug-call-stack .monaco-list-row").all_inner_texts()
    return [" ".join(row.split()) for row in rows]


async def run_command(page: Any, title: str, pick: str | None = None) -> None:
    """Run ``title`` from the command palette (and choose ``pick`` in its list)."""
    await page.keyboard.press("F1")
    await page.keyboard.type(title)
    await page.locator(".quick-input-list .monaco-list-row", has_text=title).first.wait_for()
    await page.keyboard.press("Enter")
    if pick is not None:
        await page.locator(".quick-input-list .monaco-list-row", has_text=pick).first.click()


@contextlib.asynccontextmanager
async def chromium_page(
    profile: Path, *, viewport: ViewportSize, timeout_ms: float, executable: Path = CHROMIUM
) -> AsyncIterator[Any]:
    """The first page of a headless chromium with its own ``profile`` folder; every wait on
    it times out after ``timeout_ms``. Closed (with the browser) at the end of the block.
    ``executable``: chromium, or a script that starts it (in another network namespace)."""
    from playwright.async_api import async_playwright  # the tests skip without it

    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(executable), headless=True, args=CHROMIUM_ARGS,
            viewport=viewport,
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            page.set_default_timeout(timeout_ms)
            yield page
        finally:
            await context.close()


LOOPBACK_ONLY = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
"""A wrapper that runs the job in a network namespace of its own with loopback only."""


def offline_wrapper() -> list[str] | None:
    """:data:`LOOPBACK_ONLY`, or None where a network namespace cannot be made here."""
    if os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "nsenter", "ip"))):
        return None
    probe = subprocess.run([*LOOPBACK_ONLY, "true"], capture_output=True, timeout=30)
    return LOOPBACK_ONLY if probe.returncode == 0 else None


def chromium_in_namespace_of(pid: int, folder: Path) -> Path:
    """A script that starts chromium in the network namespace of process ``pid``."""
    script = folder / "chromium-offline"
    script.write_text(f'#!/bin/sh\nexec nsenter --net=/proc/{pid}/ns/net {CHROMIUM} "$@"\n')
    script.chmod(0o700)
    return script


def unreachable_from(pid: int) -> bool:
    """Whether a public address is unreachable from the network namespace of ``pid``
    (where loopback is up)."""
    namespace = ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "route", "get"]
    loopback = subprocess.run([*namespace, "127.0.0.1"], capture_output=True, timeout=30)
    public = subprocess.run([*namespace, "1.1.1.1"], capture_output=True, timeout=30)
    return loopback.returncode == 0 and public.returncode != 0
