"""The notebook in the failed frame, in the pod's own code-server, driven in Chromium as a
person works: a task fails, the IDE opens stopped in the failed frame, the engineer opens
the notebook from the status bar (podcode: Open notebook on the failure) and runs cells in
that frame: one prints a local, one draws a matplotlib figure (an image in the output), one
shows a DataFrame (a table), one raises (a traceback; the session keeps waiting), one that
would never end is interrupted from the toolbar (and one that prints, its print shown
while it runs); then the fix is saved and a cell resumes
the workflow, which ends with the fixed result. With the network cut where a namespace can
be made: the task, its code-server and Chromium in a network namespace with loopback only
(nothing is downloaded). A screenshot of the figure goes to artifacts/notebook-figure.png
(docs/images shows it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser import (
    ARTIFACTS,
    CHROMIUM,
    IN_CELL,
    MARKS,
    MIDDLE_FIXED,
    MIDDLE_HELPERS,
    MIDDLE_JOB,
    VIEWPORT,
    chromium_in_namespace_of,
    chromium_page,
    in_outputs,
    log_in,
    offline_wrapper,
    unreachable_from,
)
from tests.session_fixture import Job

playwright_api = pytest.importorskip("playwright.async_api")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

pytestmark = [pytest.mark.codeserver, pytest.mark.slow, *MARKS]

CELLS: list[tuple[str, str | None]] = [
    ('print("total is", total)', "text=total is 12"),
    ("import matplotlib.pyplot as plt\n"
     "plt.figure(figsize=(4, 2.5))\n"
     "plt.bar([str(v) for v in values], [v * total for v in values])\n"
     "plt.title(f'values x total ({total})');", "img"),
    ('import pandas as pd\npd.DataFrame({"value": values, "scaled": [v * 2 for v in values]})',
     "table >> text=scaled"),
    ("values[10]", "text=IndexError"),
]


async def run_cells(page: Any, cells: list[tuple[str, str | None]]) -> None:
    """Type each cell into the focused cell, run it and insert the next one (Alt+Enter),
    and wait for what it shows."""
    for code, shows in cells:
        await page.keyboard.press("Control+A")
        await page.keyboard.insert_text(code)
        await page.keyboard.press("Alt+Enter")
        if shows is not None:
            await in_outputs(page, shows)


async def test_cells_run_in_the_failed_frame_and_resume_the_task(
    job: Job, code_server_binary: Any, tmp_path: Path
) -> None:
    """With the network cut where a namespace can be made (root, as in a pod and in CI):
    the task, its code-server and Chromium see loopback only, so nothing is downloaded."""
    wrapper = offline_wrapper()
    offline = wrapper is not None
    job.write("helpers.py", MIDDLE_HELPERS)
    job.write("job.py", MIDDLE_JOB)
    record = job.start(wrapper=wrapper).wait_state("waiting", timeout=120)
    assert job.proc is not None
    if offline:  # nothing outside is reachable from where the session serves
        assert unreachable_from(job.proc.pid)
    chromium = chromium_in_namespace_of(job.proc.pid, tmp_path) if offline else CHROMIUM
    ARTIFACTS.mkdir(exist_ok=True)
    async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                             timeout_ms=120_000, executable=chromium) as page:
        try:
            await log_in(page, record)
            # The post-mortem attaches by itself: the notebook works beside the stopped debugger.
            await page.locator(".debug-variables .monaco-list-row",
                               has_text=re.compile(r"^total\s*=\s*12$")).wait_for()
            await page.keyboard.press("Control+J")  # the panel closed: room for the notebook
            await page.locator(".statusbar-item", has_text="notebook").click()  # one click
            await page.locator(".notebook-editor").first.wait_for()
            # The companion's kernel is selected, named after the session's task.
            await page.get_by_text("podcode: job.py:middle (failed frame)").first.wait_for()
            await page.keyboard.press("Control+B")  # the side bar closed too
            # The starter's Markdown renders (its headings), offline too.
            await in_outputs(page, "h1 >> text=failed")
            await in_outputs(page, "h2 >> text=The task's code")
            # The cursor waits in the starter's empty cell: type, and run.
            await page.wait_for_function(IN_CELL, polling=50)
            await run_cells(page, CELLS[:2])
            await (await in_outputs(page, "img")).wait_for(state="visible")
            await page.wait_for_timeout(500)  # the output's height settles
            await page.screenshot(path=str(ARTIFACTS / "notebook-figure.png"))
            await run_cells(page, CELLS[2:])
            after = job.session()  # the record: the API may be in another network namespace
            assert after is not None and after["state"] == "waiting", after  # the cell raised

            # A cell that would never end, stopped from the notebook's toolbar at once; then
            # one whose print shows while it runs, stopped once it has shown.
            interrupt = page.locator(".notebook-toolbar-container").get_by_text(
                "Interrupt", exact=True)
            await run_cells(page, [("while True: pass", None)])
            await interrupt.click()
            await in_outputs(page, "text=KeyboardInterrupt")
            await run_cells(page, [("print('looping')\nwhile True: pass", "text=looping")])
            await interrupt.click()
            await in_outputs(page, "text=KeyboardInterrupt", count=2)

            job.write("helpers.py", MIDDLE_FIXED)
            await run_cells(page, [("from interactive.doors.notebook import here\n"
                                    "here.resume()", None)])
            assert job.wait_exit(timeout=60) == 0
        except BaseException:
            await page.screenshot(path=str(ARTIFACTS / "notebook-failure.png"))
            (ARTIFACTS / "notebook-failure.html").write_text(await page.content())
            raise
    assert "RESULT 6" in job.output()  # (1 + 2 + 3) with the fixed helper
