"""Each local rank's notebook runs in that rank's failed frame, in the pod's code-server
(the leader's), driven in Chromium: torchrun starts two ranks, both wait in sessions, and
the status bar's **notebook** item asks which rank; a cell in rank N's notebook sees
``LOCAL_RANK == N`` and that rank's locals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser import (
    ARTIFACTS,
    IN_CELL,
    MARKS,
    VIEWPORT,
    chromium_page,
    in_outputs,
    log_in,
)
from tests.torchrun_job import Torchrun, copy_example

pytest.importorskip("playwright.async_api")
pytest.importorskip("torch")

pytestmark = [pytest.mark.codeserver, pytest.mark.slow, *MARKS]


async def test_each_local_ranks_notebook_runs_in_that_ranks_frame(
    tmp_path: Path, podcode_home: Path, code_server_binary: Any
) -> None:
    copy_example(tmp_path / "workspace")
    job = Torchrun(tmp_path / "workspace", podcode_home, env={"PODCODE_IDE": "code-server"})
    try:
        ranks = [job.wait_waiting(0), job.wait_waiting(1)]
        [leader] = [local for local, record in enumerate(ranks) if record.get("leader")]
        async with chromium_page(tmp_path / "chromium-profile", viewport=VIEWPORT,
                                 timeout_ms=120_000) as page:
            try:
                await log_in(page, ranks[leader])
                # The post-mortem attaches to both ranks; then the notebooks, one per rank.
                await page.locator(".debug-variables .monaco-list-row",
                                   has_text=re.compile(r"^rank\s*=")).first.wait_for()
                await page.keyboard.press("Control+J")
                for local in (1 - leader, leader):
                    await page.locator(".statusbar-item", has_text="notebook").click()
                    await page.locator(".quick-input-list .monaco-list-row",
                                       has_text=f"local rank {local}").click()
                    kernel = rf"^podcode: .*step, local rank {local} \(failed frame\)$"
                    await page.get_by_text(re.compile(kernel)).first.wait_for()
                    await page.wait_for_function(IN_CELL, polling=50)
                    await page.keyboard.insert_text("import os\nos.environ['LOCAL_RANK'], rank")
                    await page.keyboard.press("Alt+Enter")
                    await in_outputs(page, f"text=('{local}', {local})")
            except BaseException:
                ARTIFACTS.mkdir(exist_ok=True)
                await page.screenshot(path=str(ARTIFACTS / "notebook-ranks-failure.png"))
                raise
    finally:
        job.stop()
