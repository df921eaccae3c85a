"""The IDE in a real browser: Debian's chromium logs in to the real code-server, shows the
workspace and the companion's status-bar item; typing and the resume command reach a real
control API. A screenshot goes to artifacts/."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from aiohttp import web

from server_bootstrap.codeserver import CodeServer
from tests.browser import ARTIFACTS, MARKS, chromium_page
from tests.codeserver_fixture import code_server_processes
from tests.waiting import eventually

playwright_api = pytest.importorskip("playwright.async_api")

TOKEN = "browser-test-token"
PASSWORD = "browser-test-password"

pytestmark = [pytest.mark.codeserver, *MARKS]


@dataclass
class ControlApi:
    """A tiny control API that records what the extension asks of it."""

    url: str = ""
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    reap_at: float = field(default_factory=lambda: time.time() + 1500)

    def paths(self) -> list[str]:
        return [path for _, path, _ in self.calls]


@pytest.fixture
async def control_api() -> AsyncIterator[ControlApi]:
    api = ControlApi()

    async def handle(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        body = await request.json() if request.can_read_body else None
        api.calls.append((request.method, request.path, body))
        if request.path == "/api/status":
            return web.json_response({"state": "waiting", "task": "train.fit", "error": None,
                                      "reap_at": api.reap_at, "idle_seconds": 12.0})
        if request.path == "/api/resume":
            return web.json_response({"state": "resuming"}, status=202)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/api/{name}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    api.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield api
    finally:
        await runner.cleanup()


def _workspace(root: Path, control_url: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / "train.py").write_text("def fit(lr):\n    return 1 / lr\n")
    (root / "data_loading.py").write_text("ROWS = 3\n")
    session = root / ".vscode" / "podcode-session.json"
    session.parent.mkdir()
    session.write_text(json.dumps({"control_url": control_url, "token": TOKEN,
                                   "task": "train.fit"}))
    session.chmod(0o600)
    return root


async def test_workbench_with_companion_in_chromium(
    code_server_factory: Callable[..., CodeServer], control_api: ControlApi, tmp_path: Path
) -> None:
    workspace = _workspace(tmp_path / "workspace", control_api.url)
    home = tmp_path / "home"  # a login shell would add FROM_LOGIN_SHELL: the IDE must not
    home.mkdir()
    (home / ".bash_profile").write_text("export FROM_LOGIN_SHELL=login\n")
    server = code_server_factory(workspace=workspace, password=PASSWORD, companion=True,
                                 env={"HOME": str(home), "FROM_TASK": "task"})
    await server.start()
    async with chromium_page(tmp_path / "chromium-profile", viewport={"width": 1400, "height": 900},
                             timeout_ms=60_000) as page:
        await page.goto(server.url)
        await page.fill("input[type=password]", "not the password")
        await page.click("input[type=submit], button[type=submit]")
        await page.wait_for_selector("text=Incorrect password")
        await page.fill("input[type=password]", PASSWORD)
        await page.click("input[type=submit], button[type=submit]")
        await page.wait_for_selector(".monaco-workbench")
        explorer = page.locator(".explorer-folders-view")
        await explorer.get_by_text("train.py", exact=True).wait_for()
        await explorer.get_by_text("data_loading.py", exact=True).wait_for()
        item = page.locator(".statusbar-item", has_text="podcode: waiting")
        await item.wait_for()
        assert "cleanup in 2" in (await item.inner_text())  # 25m, minus the load time
        assert "/api/status" in control_api.paths()
        await _status_bar_picture(page, item)

        await explorer.get_by_text("train.py", exact=True).click()
        editor = page.locator(".editor-instance .monaco-editor .view-lines").first
        await editor.get_by_text("return 1 / lr").wait_for()
        await editor.click()
        await page.keyboard.press("Control+End")
        await page.keyboard.type("# fixed by hand")
        await editor.get_by_text("# fixed by hand").wait_for()
        await eventually(lambda: ("POST", "/api/activity", {"kind": "typing"})
                         in control_api.calls, timeout=30, poll=0.2)

        await page.keyboard.press("F1")
        await page.keyboard.type("podcode: Resume workflow")
        await page.locator(".quick-input-list .monaco-list-row",
                           has_text="Resume workflow").first.wait_for()
        await page.keyboard.press("Enter")
        await eventually(lambda: "/api/resume" in control_api.paths(), timeout=30, poll=0.2)
        await page.get_by_text("resuming the workflow with your edits").first.wait_for()

        # A terminal: its shell gets a session of its own, yet stop() must end it. It has
        # the task's environment, not one re-read from a login shell.
        await page.keyboard.press("F1")
        await page.keyboard.type("Terminal: Create New Terminal")
        await page.locator(".quick-input-list .monaco-list-row",
                           has_text="Create New Terminal").first.wait_for()
        await page.keyboard.press("Enter")
        await page.locator(".terminal-wrapper").first.wait_for()
        await eventually(lambda: bool(_shells(server)), timeout=30, poll=0.2)
        await page.wait_for_timeout(1000)
        await page.keyboard.type(
            "echo $((6*7)) $FROM_TASK ${FROM_LOGIN_SHELL:-none} > typed-in-terminal.txt")
        await page.keyboard.press("Enter")
        typed = workspace / "typed-in-terminal.txt"
        await eventually(lambda: typed.exists() and typed.read_text() == "42 task none\n",
                         timeout=30, poll=0.2)
        await eventually(lambda: ("POST", "/api/activity", {"kind": "terminal"})
                         in control_api.calls, timeout=30, poll=0.2)

        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "ide-workbench.png"))
    shells = _shells(server)
    assert any(os.getsid(p.pid) != os.getsid(server.pid or 0) for p in shells), shells
    await server.stop()
    assert code_server_processes(server) == []
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in shells)


def _shells(server: CodeServer) -> list[psutil.Process]:
    return [p for p in code_server_processes(server)
            if p.name() in ("bash", "sh", "dash", "zsh")]


async def test_the_resume_configuration_resumes_without_a_debug_session(
    code_server_factory: Callable[..., CodeServer], control_api: ControlApi, tmp_path: Path
) -> None:
    """"podcode: resume workflow" in Run and Debug: the companion's debug type runs the
    Resume command; no debugger starts, and nothing says the type is unsupported."""
    workspace = _workspace(tmp_path / "workspace", control_api.url)
    (workspace / ".vscode" / "launch.json").write_text(json.dumps({
        "version": "0.2.0",
        "configurations": [{"name": "podcode: resume workflow", "type": "podcode",
                            "request": "launch", "action": "resume"}],
    }))
    server = code_server_factory(workspace=workspace, password=PASSWORD, companion=True)
    await server.start()
    async with chromium_page(tmp_path / "chromium-profile", viewport={"width": 1100, "height": 640},
                             timeout_ms=120_000) as page:
        await page.goto(server.url)
        await page.fill("input[type=password]", PASSWORD)
        await page.click("input[type=submit], button[type=submit]")
        await page.locator(".statusbar-item", has_text="podcode: waiting").wait_for()
        await page.keyboard.press("F5")  # the only configuration
        await eventually(lambda: "/api/resume" in control_api.paths(), timeout=30, poll=0.2)
        await page.get_by_text("resuming the workflow with your edits").first.wait_for()
        assert await page.get_by_text("is not supported").count() == 0
        assert await page.locator(".debug-toolbar").count() == 0  # no debug session
    await server.stop()


async def _status_bar_picture(page: Any, item: Any) -> None:
    """The status bar around the companion's item, for the docs (artifacts/status-bar.png)."""
    bar = await page.locator(".part.statusbar").bounding_box()
    box = await item.bounding_box()
    assert bar is not None and box is not None
    left = max(bar["x"], box["x"] - 420)
    right = min(bar["x"] + bar["width"], box["x"] + box["width"] + 220)
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "status-bar.png"),
                          clip={"x": left, "y": bar["y"], "width": right - left,
                                "height": bar["height"]})
