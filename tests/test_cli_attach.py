"""``podcode attach`` and ``podcode debug`` end to end: the real client, the in-process API
server's port-forward, and a real control API (``interactive.doors.control``) behind it."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interactive.cli import Console, Exit, run
from tests.cli_fixture import LiveSession
from tests.fake_kube import FakeKube


def wait_for(predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Running:
    """A CLI verb running in a thread until its console's stop flag is set."""

    def __init__(self, argv: list[str], **console_options: object) -> None:
        self.browser: list[str] = []
        self.console = Console(out=io.StringIO(), err=io.StringIO(), environ=os.environ,
                               open_browser=self.browser.append, **console_options)  # type: ignore[arg-type]
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, args=(argv,), daemon=True)
        self.thread.start()

    def _run(self, argv: list[str]) -> None:
        self.code = run(argv, self.console)

    @property
    def out(self) -> str:
        return self.console.out.getvalue()  # type: ignore[attr-defined,no-any-return]

    @property
    def err(self) -> str:
        return self.console.err.getvalue()  # type: ignore[attr-defined,no-any-return]

    def wait_output(self, text: str) -> None:
        wait_for(lambda: text in self.out or self.code is not None, repr(text))
        assert text in self.out, (self.out, self.err)

    def stop(self) -> int | None:
        self.console.stop.set()
        self.thread.join(30)
        return self.code


def http_get(url: str, token: str | None = None) -> tuple[int, str]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    path = "/" + url.split("//")[1].partition("/")[2]
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


@pytest.fixture
def session_pod(fake_kube: FakeKube, podcode_home: Path) -> Iterator[LiveSession]:
    live = LiveSession(podcode_home)
    fake_kube.session_pod("train-0", "ml", ports=live.ports, home=str(live.home))
    yield live
    live.close()


def _line_value(text: str, label: str) -> str:
    return next(line.split(label, 1)[1].strip() for line in text.splitlines() if label in line)


def test_attach_forwards_vscode_and_the_control_api(
    session_pod: LiveSession, fake_kube: FakeKube
) -> None:
    attach = Running(["attach", "train-0", "-n", "ml", "--browser"])
    try:
        attach.wait_output("press Ctrl-C")
        url = _line_value(attach.out, "VS Code:")
        assert attach.browser == [url]
        assert _line_value(attach.out, "Password:") == session_pod.password
        assert f"{session_pod.home / 'session.json'} in the pod" in attach.out  # where it lives
        assert http_get(url) == (200, "stand-in code-server")
        control = _line_value(attach.out, "Control:")
        status, body = http_get(control + "/api/status", session_pod.token)
        assert status == 200 and json.loads(body)["task"] == "train.fit"
        assert session_pod.token not in attach.out + attach.err
    finally:
        assert attach.stop() == Exit.OK
    forwards = [r for r in fake_kube.requests if r.path.endswith("/portforward")]
    assert {r.query["ports"][0] for r in forwards} == {
        str(session_pod.ide_port), str(session_pod.control_port)}


def test_attach_on_a_chosen_port_as_json(session_pod: LiveSession) -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    attach = Running(["attach", "train-0", "-n", "ml", "--port", str(port), "-o", "json"])
    try:
        wait_for(lambda: attach.out.strip() or attach.code is not None, "the JSON line")
        announced = json.loads(attach.out.splitlines()[0])
        assert announced["url"] == f"http://127.0.0.1:{port}/"
        assert announced["password"] == session_pod.password
        assert announced["state"] == "waiting"
    finally:
        assert attach.stop() == Exit.OK


def test_attach_to_a_busy_local_port(session_pod: LiveSession) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        attach = Running(["attach", "train-0", "-n", "ml", "--port", str(port)])
        attach.thread.join(30)
    assert attach.code == Exit.USAGE
    assert f"cannot listen on local port {port}" in attach.err


def test_attach_without_an_ide_points_to_debug(fake_kube: FakeKube, podcode_home: Path) -> None:
    live = LiveSession(podcode_home, ide=False)
    try:
        fake_kube.session_pod("headless", ports=live.ports, home=str(live.home))
        attach = Running(["attach", "headless"])
        attach.wait_output("press Ctrl-C")
        assert "this session serves no IDE (it runs with ide=\"none\")" in attach.out
        assert "podcode debug headless" in attach.out
        assert attach.stop() == Exit.OK
    finally:
        live.close()


def test_attach_reconnects_after_the_api_server_drops(
    session_pod: LiveSession, fake_kube: FakeKube
) -> None:
    attach = Running(["attach", "train-0", "-n", "ml"], watch_seconds=0.05)
    try:
        attach.wait_output("press Ctrl-C")
        url = _line_value(attach.out, "VS Code:")
        with fake_kube.offline():
            wait_for(lambda: "lost the connection" in attach.err, "the loss to be noticed")
        wait_for(lambda: "reconnected" in attach.err, "the reconnection")
        assert http_get(url) == (200, "stand-in code-server")
    finally:
        assert attach.stop() == Exit.OK


def test_attach_ends_when_the_pod_is_deleted(session_pod: LiveSession, fake_kube: FakeKube) -> None:
    attach = Running(["attach", "train-0", "-n", "ml"], watch_seconds=0.05)
    attach.wait_output("press Ctrl-C")
    fake_kube.remove_pod("train-0", "ml")
    attach.thread.join(30)
    assert attach.code == Exit.NOT_FOUND
    assert "no pod train-0 in namespace ml" in attach.err


def test_debug_writes_a_launch_configuration_and_forwards_debugpy(
    session_pod: LiveSession, fake_kube: FakeKube, tmp_path: Path
) -> None:
    debugpy = socket.create_server(("127.0.0.1", 0))
    session_pod.debug_port = debugpy.getsockname()[1]
    session_pod.write_record()
    fake_kube.session_pod("train-0", "ml", ports=session_pod.ports, home=str(session_pod.home))
    checkout = tmp_path / "checkout"
    (checkout / ".vscode").mkdir(parents=True)
    (checkout / ".vscode" / "launch.json").write_text(
        '{\n  // mine\n  "version": "0.2.0",\n  "configurations": [\n'
        '    {"name": "Python: current file", "type": "debugpy", "request": "launch"},\n  ]\n}\n'
    )
    debug = Running(["debug", "train-0", "-n", "ml", "--write", "--local-root", str(checkout)])
    try:
        debug.wait_output("press Ctrl-C")
        launch = json.loads((checkout / ".vscode" / "launch.json").read_text())
        names = [c["name"] for c in launch["configurations"]]
        assert names == ["Python: current file", "podcode: attach to train-0"]
        mine = launch["configurations"][1]
        assert mine["pathMappings"] == [{"localRoot": str(checkout.resolve()),
                                         "remoteRoot": "/workspace/src"}]
        port = mine["connect"]["port"]
        with socket.create_connection(("127.0.0.1", port), timeout=20) as client:
            client.sendall(b"Content-Length: 2\r\n\r\n{}")
            conn, _ = debugpy.accept()
            with conn:
                assert conn.recv(100) == b"Content-Length: 2\r\n\r\n{}"
        assert (checkout / ".vscode" / "launch.json.bak").read_text().count("// mine") == 1
    finally:
        assert debug.stop() == Exit.OK
        debugpy.close()


def test_debug_prints_the_configuration_by_default(session_pod: LiveSession) -> None:
    debug = Running(["debug", "train-0", "-n", "ml", "-o", "json"])
    try:
        wait_for(lambda: debug.out.strip() or debug.code is not None, "the JSON line")
        configuration = json.loads(debug.out.splitlines()[0])["configuration"]
        assert configuration["request"] == "attach"
        assert configuration["pathMappings"][0]["remoteRoot"] == "/workspace/src"
    finally:
        assert debug.stop() == Exit.OK
