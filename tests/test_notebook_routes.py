"""The control API's notebook routes against a real aiohttp server, cells in a real failed
frame: behind the token, the starter notebook written once (0600), cells that run while the
task waits (409 otherwise), an interrupt, and the helpers a cell calls (here.*)."""

from __future__ import annotations

import asyncio
import itertools
import json
import stat
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from interactive.base.phases import Phase
from interactive.base.settings import EditorSettings, Settings
from interactive.doors.notebook import routes
from tests.cli_fixture import served_api
from tests.notebook_fixture import Host, failure_of_failing


@pytest.fixture
async def api(tmp_path: Path):
    host, failure = Host(tmp_path), failure_of_failing()
    async with served_api(host, failure=lambda: failure) as (client, url):
        yield host, client, url


async def _cell(client: aiohttp.ClientSession, code: str) -> dict[str, Any]:
    async with client.post("/api/notebook/execute", json={"code": code}) as response:
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def test_the_notebook_routes_need_the_token(api) -> None:
    host, _, url = api
    async with aiohttp.ClientSession(url) as anonymous:
        for path in ("open", "execute", "interrupt"):
            async with anonymous.post(f"/api/notebook/{path}", json={"code": "1"}) as response:
                assert response.status == 401
    assert not (host.config_root / ".vscode").exists()


async def test_the_starter_notebook_is_written_once(api) -> None:
    host, client, _ = api
    async with client.post("/api/notebook/open") as response:
        opened = await response.json()
    path = Path(opened["path"])
    assert path == host.config_root / ".vscode" / "podcode" / "notebook-41-7.ipynb"
    assert opened["created"] and opened["label"] == "podcode: jobs.train (failed frame)"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    notebook = json.loads(path.read_text())
    assert notebook["nbformat"] == 4
    scratch = notebook["cells"][opened["cell"]]  # where the IDE puts the cursor: empty
    assert scratch["cell_type"] == "code" and scratch["source"] == ""
    text = "\n".join(cell["source"] for cell in notebook["cells"])
    assert "def _failing(rows" in text  # the failed function's source
    assert "ValueError: total too large: 12" in text
    for helper in ("here.error()", "here.inputs()", "here.run_again()", "here.resume()"):
        assert helper in text
    assert host.snapshot is not None and host.snapshot.changed() == []  # not an edit yet
    path.write_text(path.read_text().replace("jobs.train failed", "my notes"))
    async with client.post("/api/notebook/open") as response:
        assert not (await response.json())["created"]
    assert "my notes" in path.read_text()  # the engineer's edits stay
    # ... and are saved with the edits; a notebook removed with the session files is not.
    assert host.snapshot.changed() == [".vscode/podcode/notebook-41-7.ipynb"]
    path.unlink()
    assert host.snapshot.changed() == []


async def test_for_jupyterlab_the_starter_is_written_when_the_session_waits(
    tmp_path: Path
) -> None:
    """JupyterLab opens the starter notebook at once: nobody asks for it first."""
    host, failure = Host(tmp_path), failure_of_failing()
    host.settings = Settings(editor=EditorSettings(ide="jupyter"))
    host.state.set(state=Phase.RESUMING)
    host.state.set(state=Phase.RUNNING)
    path = host.config_root / ".vscode" / "podcode" / "notebook-41-7.ipynb"
    async with served_api(host, failure=lambda: failure):
        await asyncio.sleep(0.2)
        assert not path.exists()  # not while the task runs
        host.state.set(state=Phase.WAITING)
        for _ in range(100):
            if path.exists():
                break
            await asyncio.sleep(0.05)
        assert "total too large: 12" in path.read_text()
        assert host.snapshot is not None and host.snapshot.changed() == []


async def test_cells_run_in_the_failed_frame_while_the_task_waits(api) -> None:
    host, client, _ = api
    shown = await _cell(client, "total * 2")
    assert shown["ok"] and shown["outputs"][0]["data"]["text/plain"] == "24"
    host.state.set(state=Phase.RESUMING)
    async with client.post("/api/notebook/execute", json={"code": "1"}) as response:
        assert response.status == 409
        assert "resuming" in (await response.json())["error"]
    async with client.post("/api/notebook/execute", json={"cell": "1"}) as response:
        assert response.status == 400


async def test_a_cell_calls_the_sessions_helpers(api) -> None:
    host, client, _ = api
    error = await _cell(client, "from interactive.doors.notebook import here\nhere.error()")
    printed = "".join(o.get("text", "") for o in error["outputs"])
    assert "ValueError: total too large: 12" in printed and "_failing" in printed, error
    resumed = await _cell(client, "here.resume()")
    assert resumed["outputs"][-1]["data"]["text/plain"] == "{'patched': []}", resumed
    assert host.resumed == 1


async def test_an_idle_kernel_has_nothing_to_interrupt(api) -> None:
    _, client, _ = api
    async with client.post("/api/notebook/interrupt") as response:
        assert (await response.json()) == {"result": "idle"}


async def test_a_running_cell_keeps_the_session_active(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cells' thread is podcode's (never counted as CPU activity): a long cell renews
    the session's activity while it runs, so the idle monitor never reaps a working cell."""
    monkeypatch.setattr(routes, "BUSY_TOUCH_SECONDS", 0.05)
    host, failure = Host(tmp_path), failure_of_failing()
    ticks = itertools.count(2000)
    host.state.clock = lambda: float(next(ticks))
    async with served_api(host, failure=lambda: failure) as (client, _):
        shown = await _cell(client, "import time\ntime.sleep(0.6)\n'slept'")
    assert shown["ok"]
    assert host.state.last_activity >= 2004  # the request's own touch, then the cell's


def test_a_distributed_tasks_kernel_names_its_local_rank() -> None:
    from interactive.doors.notebook.starter import label

    assert label("train") == "podcode: train (failed frame)"
    assert label("train", 1) == "podcode: train, local rank 1 (failed frame)"


async def test_a_streamed_cell_sends_its_prints_as_they_come(api) -> None:
    """The first print reaches the client while the cell still runs (it waits for the test
    to have read it); then the whole answer, as without streaming."""
    from tests import notebook_fixture

    _, client, _ = api
    notebook_fixture.GATE.clear()
    code = ("import tests.notebook_fixture as gate\nprint('first', total)\n"
            "gate.GATE.wait(30)\nprint('second')\n'done'")
    lines = []
    async with client.post("/api/notebook/execute", json={"code": code, "stream": True}) as answer:
        assert answer.status == 200 and answer.content_type == "application/x-ndjson"
        lines.append(json.loads(await answer.content.readline()))
        notebook_fixture.GATE.set()  # only now can the cell go on
        async for raw in answer.content:
            lines.append(json.loads(raw))
    assert lines[0] == {"output": {"type": "stream", "name": "stdout", "text": "first 12\n"}}
    assert lines[-1]["result"]["outputs"] == [
        {"type": "stream", "name": "stdout", "text": "first 12\nsecond\n"},
        {"type": "display", "data": {"text/plain": "'done'"}}]


def test_streamed_prints_are_merged_and_capped() -> None:
    from interactive.doors.notebook import printed

    loop = asyncio.new_event_loop()
    try:
        sent = printed.Printed(loop)
        for text in ("a", "b", "c" * printed.MAX_STREAMED_CHARS):
            sent("stdout", text)
        sent("stderr", "lost: past the cap")
        [out] = sent.take()
        assert out["text"] == ("ab" + "c" * printed.MAX_STREAMED_CHARS)[:printed.MAX_STREAMED_CHARS]
        assert sent.take() == []
    finally:
        loop.close()


async def test_stopping_the_api_never_waits_for_a_cell_in_native_code(tmp_path: Path) -> None:
    """A cell blocked in native code (a lock's wait, as ``time.sleep``) and one queued
    behind it: the API's stop answers both at once (left running, not run) and returns
    while the first still blocks, on a thread nothing waits for."""
    from interactive.base.ports import listen_socket
    from interactive.doors.control import ControlServer
    from tests import notebook_fixture

    host, failure = Host(tmp_path), failure_of_failing()
    notebook_fixture.HOLD.clear()
    server = ControlServer(host, "s3cret", listen_socket("127.0.0.1", 0), failure=lambda: failure)
    await server.start()
    assert server.notebook is not None
    kernel = server.notebook.kernel
    blocked = "import tests.notebook_fixture as f\nf.HOLD.wait(120)\n'returned'"
    try:
        async with aiohttp.ClientSession(
            server.url, headers={"Authorization": "Bearer s3cret"}
        ) as client:
            streamed = asyncio.ensure_future(client.post(
                "/api/notebook/execute", json={"code": blocked, "stream": True}))
            while not kernel.busy():
                await asyncio.sleep(0.01)
            queued = asyncio.ensure_future(_cell(client, "'queued'"))
            await asyncio.sleep(0.2)  # the second request reaches the kernel's queue
            await asyncio.wait_for(server.stop(), 60)  # a guard against a hang, not a timing
            assert kernel.busy() and not notebook_fixture.HOLD.is_set()  # still in the call
            async with await streamed as answer:
                [last] = [json.loads(raw) async for raw in answer.content]
            left = last["result"]
            assert not left["ok"] and "left running" in left["outputs"][-1]["evalue"], left
            not_run = await queued
            assert not not_run["ok"] and "before this cell ran" in not_run["outputs"][-1]["evalue"]
            later = kernel.execute("'after the stop'").result(30).as_dict()  # answered at once
            assert not later["ok"] and "before this cell ran" in later["outputs"][-1]["evalue"]
    finally:
        notebook_fixture.HOLD.set()


class SlowPlan(Host):
    """A session whose resume plans until the test lets it (as a big workspace does)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.planning = threading.Event()
        self.go_on = threading.Event()

    def resume(self, peer: bool = False) -> dict[str, Any] | None:
        self.planning.set()
        if not self.go_on.wait(20):
            raise RuntimeError("the plan was never let go on")
        return super().resume(peer)


async def test_status_and_cells_answer_while_a_resume_plans(tmp_path: Path) -> None:
    host, failure = SlowPlan(tmp_path), failure_of_failing()
    async with served_api(host, failure=lambda: failure) as (client, _):

        async def resume() -> tuple[int, dict[str, Any]]:
            async with client.post("/api/resume") as response:
                return response.status, await response.json()

        resuming = asyncio.create_task(resume())
        assert await asyncio.to_thread(host.planning.wait, 20)
        async with client.get("/api/status") as response:  # the loop is free meanwhile
            assert response.status == 200 and (await response.json())["state"] == "waiting"
        shown = await _cell(client, "6 * 7")
        assert shown["outputs"][0]["data"]["text/plain"] == "42"
        assert not resuming.done() and host.resumed == 0  # the plan still runs
        host.go_on.set()
        assert await resuming == (202, {"state": "resuming", "patched": []})
        assert host.resumed == 1


async def test_status_answers_while_a_cells_resume_plans(tmp_path: Path) -> None:
    host, failure = SlowPlan(tmp_path), failure_of_failing()
    async with served_api(host, failure=lambda: failure) as (client, _):
        cell = asyncio.create_task(
            _cell(client, "from interactive.doors.notebook import here\nhere.resume()"))
        assert await asyncio.to_thread(host.planning.wait, 20)
        async with client.get("/api/status") as response:
            assert response.status == 200
        assert not cell.done() and host.resumed == 0
        host.go_on.set()
        resumed = await cell
        assert resumed["outputs"][-1]["data"]["text/plain"] == "{'patched': []}", resumed
