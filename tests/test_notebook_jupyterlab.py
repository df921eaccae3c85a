"""JupyterLab in the failed frame (``ide="jupyter"``), driven in Chromium as a person works.

A task fails; the session serves JupyterLab (loopback, the session's password as Jupyter's
token) opening the starter notebook on the ``podcode`` kernel. The engineer types the
token at JupyterLab's login page and runs cells below the starter's: one prints a local of
the failed frame, one draws a matplotlib figure (an image), one shows a DataFrame (a
table), one raises (a traceback; the session keeps waiting), one loops forever and is
interrupted from the toolbar; then the fix is saved and a cell resumes the workflow,
which ends with the fixed result. With the network cut where a namespace can be made:
the task, JupyterLab and Chromium see loopback only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser import (
    ARTIFACTS,
    CHROMIUM,
    MARKS,
    MIDDLE_FIXED,
    MIDDLE_HELPERS,
    MIDDLE_JOB,
    VIEWPORT,
    chromium_in_namespace_of,
    chromium_page,
    offline_wrapper,
)
from tests.session_fixture import Job

pytest.importorskip("playwright.async_api")
pytest.importorskip("jupyterlab")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

pytestmark = [pytest.mark.slow, *MARKS]

OUTPUT = ".jp-OutputArea-output"
CELLS: list[tuple[str, str]] = [
    ('print("total is", total)', f"{OUTPUT} >> text=total is 12"),
    ("import matplotlib.pyplot as plt\n"
     "plt.figure(figsize=(4, 2.5))\n"
     "plt.bar([str(v) for v in values], [v * total for v in values]);", f"{OUTPUT} img"),
    ('import pandas as pd\npd.DataFrame({"value": values, "scaled": [v * 2 for v in values]})',
     f"{OUTPUT} table >> text=scaled"),
    ("values[10]", f"{OUTPUT} >> text=IndexError"),
]


def _starter(workspace: Path, timeout: float = 10) -> Path:
    """The starter notebook, written as the session starts to wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list((workspace / ".vscode" / "podcode").glob("notebook-*.ipynb"))
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("no starter notebook in .vscode/podcode")


async def run_cell(page: Any, code: str) -> None:
    """Type ``code`` into the cell being edited, run it and edit a new one below."""
    await page.keyboard.insert_text(code)
    await page.keyboard.press("Alt+Enter")


async def test_jupyterlab_cells_run_in_the_failed_frame_and_resume_the_task(
    job: Job, tmp_path: Path
) -> None:
    wrapper = offline_wrapper()
    job.write("helpers.py", MIDDLE_HELPERS)
    job.write("job.py", MIDDLE_JOB)
    record = job.start(env={"PODCODE_IDE": "jupyter"}, wrapper=wrapper).wait_state(
        "waiting", timeout=120)
    assert job.proc is not None
    assert record["code_server_url"], job.output()
    chromium = chromium_in_namespace_of(job.proc.pid, tmp_path) if wrapper else CHROMIUM
    starter = _starter(job.workspace)
    assert json.loads(starter.read_text())["metadata"]["kernelspec"]["name"] == "podcode"
    ARTIFACTS.mkdir(exist_ok=True)
    async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                             timeout_ms=120_000, executable=chromium) as page:
        try:
            await page.goto(record["code_server_url"])  # JupyterLab asks for the token
            await page.fill("input[type=password]", record["password"])
            await page.keyboard.press("Enter")
            # The starter notebook opens by itself, on the session's kernel.
            await page.locator(".jp-Notebook .jp-Cell").first.wait_for()
            await page.locator(".jp-Toolbar-kernelName",
                               has_text="podcode: job.py:middle").first.wait_for()
            await page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for()
            # A new cell below the starter's last one ("here.resume()"), being edited.
            await page.locator(".jp-Notebook .jp-Cell").last.click()
            await page.keyboard.press("Escape")
            await page.keyboard.press("b")
            await page.keyboard.press("Enter")
            for code, shows in CELLS:
                await run_cell(page, code)
                await page.locator(shows).first.wait_for()
            after = job.session()
            assert after is not None and after["state"] == "waiting", after  # the cell raised

            await run_cell(page, "import itertools\nfor step in itertools.count():\n    pass")
            await page.locator(".jp-Notebook-ExecutionIndicator[data-status='busy']").wait_for()
            asked = time.monotonic()
            await page.locator("jp-button[data-command='notebook:interrupt-kernel']").click()
            await page.locator(f"{OUTPUT} >> text=KeyboardInterrupt").first.wait_for()
            assert time.monotonic() - asked < 30  # it would never end by itself

            job.write("helpers.py", MIDDLE_FIXED)
            await run_cell(page, "from interactive.doors.notebook import here\nhere.resume()")
            assert job.wait_exit(timeout=60) == 0
        except BaseException:
            await page.screenshot(path=str(ARTIFACTS / "jupyterlab-failure.png"))
            (ARTIFACTS / "jupyterlab-failure.html").write_text(await page.content())
            raise
    assert "RESULT 6" in job.output()  # (1 + 2 + 3) with the fixed helper
