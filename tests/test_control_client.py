"""The one control-API client, against the session's real control API: its calls, each
error answer as one error class with the session's own reason, a session that does not
answer; the server serves every path the routes module names; and the companion
extension's ``lib/client.js`` uses the same paths and reads errors the same way."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from interactive.base import routes
from interactive.base.control_client import (
    ControlBadRequest,
    ControlClient,
    ControlConflict,
    ControlError,
    ControlRefused,
    ControlUnauthorized,
    ControlUnreachable,
    refusal,
)
from interactive.doors.control import build_app
from interactive.doors.desktop import Desktop
from interactive.doors.notebook.routes import Notebook
from tests import notebook_fixture
from tests.cli_fixture import Controls, served_api
from tests.notebook_fixture import Host, failure_of_failing

ROOT = Path(__file__).resolve().parents[1]
CLIENT_JS = ROOT / "vscode_config" / "extension" / "lib" / "client.js"
NODE = shutil.which("node")
ANSWERS: list[tuple[int, dict[str, Any]]] = [
    (200, {"state": "waiting"}), (202, {}), (400, {"error": "seconds must be a number"}),
    (401, {"error": "missing or wrong bearer token"}), (409, {"error": "the task is running"}),
    (500, {}), (503, {"error": "shutting down"}),
]


def _path_constants() -> dict[str, str]:
    return {name: value for name, value in vars(routes).items()
            if name.isupper() and isinstance(value, str) and value.startswith("/")
            and value != routes.API}


@pytest.mark.parametrize(("status", "body", "kind"), [
    (400, {"error": "no seconds"}, ControlBadRequest),
    (401, {"error": "missing or wrong bearer token"}, ControlUnauthorized),
    (409, {"error": "the task is running"}, ControlConflict),
    (500, {}, ControlRefused),
])
def test_an_error_answer_is_one_error_with_the_sessions_reason(
        status: int, body: dict[str, Any], kind: type[ControlError]) -> None:
    error = refusal(status, body)
    assert type(error) is kind and error.status == status
    assert error.reason == body.get("error", f"HTTP {status}")
    assert refusal(200, {"error": "not an error"}) is None


async def test_the_calls_and_their_errors_against_the_real_control_api() -> None:
    controls = Controls("waiting")
    async with served_api(controls, token="s3cret") as (_, url):
        client = ControlClient(url, "s3cret", timeout=10)
        assert await asyncio.to_thread(client.healthz)
        status = await asyncio.to_thread(client.status)
        assert status["task"] == "train.fit" and status["state"] == "waiting"
        await asyncio.to_thread(client.resume)
        with pytest.raises(ControlConflict) as conflict:  # resuming already
            await asyncio.to_thread(client.resume)
        assert conflict.value.status == 409 and "resuming" in str(conflict.value.reason)
        answer = await asyncio.to_thread(client.keepalive, 600.0)
        assert "reap_at" in answer and controls.calls == ["resume", ("keepalive", 600.0)]
        with pytest.raises(ControlBadRequest):
            await asyncio.to_thread(client.call, "POST", routes.KEEPALIVE, {"seconds": "x"})
        stranger = ControlClient(url, "not-the-token", timeout=10)
        with pytest.raises(ControlUnauthorized) as refused:
            await asyncio.to_thread(stranger.status)
        assert refused.value.reason == "missing or wrong bearer token"
        assert await asyncio.to_thread(stranger.healthz)  # open to anyone


async def test_a_cells_prints_come_before_its_answer(tmp_path: Path) -> None:
    """The cell goes on only once the client has been given its first print."""
    failure, printed = failure_of_failing(), list[dict[str, Any]]()
    notebook_fixture.GATE.clear()

    def seen(output: dict[str, Any]) -> None:
        printed.append(output)
        notebook_fixture.GATE.set()

    code = ("import tests.notebook_fixture as gate\nprint('first')\n"
            "print('then', gate.GATE.wait(20))\ntotal * 2")
    async with served_api(Host(tmp_path), failure=lambda: failure) as (_, url):
        client = ControlClient(url, "s3cret", timeout=30)
        answer = await asyncio.to_thread(client.streamed, routes.NOTEBOOK_EXECUTE,
                                         {"code": code, "stream": True}, seen)
    assert printed[0] == notebook_fixture.FIRST_PRINT
    assert answer["ok"] and answer["outputs"][-1]["data"] == {"text/plain": "24"}, answer
    assert "then True" in json.dumps(answer["outputs"])


def test_a_session_that_does_not_answer_is_unreachable() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
    client = ControlClient(url, "t", timeout=5)
    assert not client.healthz()
    with pytest.raises(ControlUnreachable) as gone:
        client.status()
    assert url in str(gone.value) and gone.value.why
    with pytest.raises(ControlError, match="not http"):
        ControlClient("https://127.0.0.1:1", "t")


def test_the_server_serves_every_path_the_routes_module_names(tmp_path: Path) -> None:
    host = Host(tmp_path)
    app = build_app(host, "t", password="pw", editors=Desktop(tmp_path, lambda: None),
                    notebook=Notebook(host, failure_of_failing))  # type: ignore[arg-type]
    served = {resource.canonical for resource in app.router.resources()}
    assert served == set(_path_constants().values())  # and no path named anywhere else
    assert routes.login("n0nce") == "/login/n0nce"


def _node(script: str) -> Any:
    assert NODE is not None
    done = subprocess.run([NODE, "-e", script, "--", str(CLIENT_JS), json.dumps(ANSWERS)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(NODE is None, reason="needs node to run the extension's code")
def test_the_companion_uses_the_same_paths_and_reads_errors_alike() -> None:
    found = _node("const c = require(process.argv[1]);\n"
                  "const answers = JSON.parse(process.argv[2]);\n"
                  "console.log(JSON.stringify({routes: c.ROUTES, refusals: answers.map("
                  "([status, body]) => c.refusal(status, body))}));")
    python = _path_constants()
    assert found["routes"] and all(python.get(name) == path
                                   for name, path in found["routes"].items()), found["routes"]
    for (status, body), js in zip(ANSWERS, found["refusals"], strict=True):
        error = refusal(status, body)
        if error is None:
            assert js is None, status
        else:
            assert js == {"kind": type(error).__name__, "status": status,
                          "reason": error.reason, "message": str(error)}, status
    # No path spelled out elsewhere in the client: each call names its route.
    assert len(re.findall(r"'/api/", CLIENT_JS.read_text())) == len(found["routes"])
