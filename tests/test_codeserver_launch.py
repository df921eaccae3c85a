"""Launching a real code-server: readiness, password, binding, restarts, stopping the tree."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from server_bootstrap.codeserver import (
    MARKER_VARIABLE,
    USER_SETTINGS,
    CodeServer,
    child_environ,
    command_line,
    config_text,
    takes_login_strings,
    url_host,
    write_private,
    write_user_settings,
)
from server_bootstrap.errors import CodeServerStartError
from tests.codeserver_fixture import code_server_processes
from tests.waiting import eventually

Factory = Callable[..., CodeServer]
PASSWORD = "test-password"


# -- pure parts -------------------------------------------------------------------------


def test_command_line_has_no_password_and_its_own_folders(tmp_path: Path) -> None:
    args = command_line(Path("/opt/cs/bin/code-server"), workspace=tmp_path / "ws",
                        bind="127.0.0.1", port=8080, data_dir=tmp_path / "d", auth="password")
    assert args[0] == "/opt/cs/bin/code-server" and args[-1] == str(tmp_path / "ws")
    pairs = dict(zip(args[1:-1:2], args[2:-1:2], strict=False))
    assert pairs["--bind-addr"] == "127.0.0.1:8080"
    assert pairs["--auth"] == "password"
    assert pairs["--user-data-dir"] == str(tmp_path / "d" / "user-data")
    assert pairs["--extensions-dir"] == str(tmp_path / "d" / "extensions")
    assert pairs["--config"] == str(tmp_path / "d" / "config.yaml")
    assert "--i18n" not in args
    assert "--disable-telemetry" in args and "--disable-update-check" in args
    assert not any("password" in a.lower() for a in args if a not in ("--auth", "password"))


def test_child_environment_carries_no_password() -> None:
    base = {"PATH": "/bin", "PASSWORD": "inherited", "HASHED_PASSWORD": "$argon2..."}
    env = child_environ(base, {"EXTRA": "x", "PASSWORD": "given"}, "m1")
    assert "PASSWORD" not in env and "HASHED_PASSWORD" not in env
    assert env["EXTRA"] == "x" and env[MARKER_VARIABLE] == "m1" and env["PATH"] == "/bin"
    assert base["PASSWORD"] == "inherited"


def test_the_config_holds_the_quoted_sha256_of_the_password() -> None:
    text = config_text("p@ss word")
    digest = hashlib.sha256(b"p@ss word").hexdigest()
    assert text == f'hashed-password: "{digest}"\n'
    assert "p@ss" not in text
    assert config_text(None) == "{}\n"


def test_private_files_are_0600_from_the_start(tmp_path: Path) -> None:
    target = tmp_path / "d" / "config.yaml"
    write_private(target, "one")
    write_private(target, "two")
    assert target.read_text() == "two" and target.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o700
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["config.yaml"]


@pytest.mark.parametrize(
    ("layout", "text", "expected"),
    [
        ("lib/node_modules/code-server/out/node/cli.js", "    i18n: {\n", True),  # npm/podcode
        ("out/node/cli.js", "    i18n: {\n", True),  # release tarball
        ("out/node/cli.js", "    locale: {\n", False),  # a code-server before --i18n
        (None, "", False),
    ],
)
def test_login_strings_only_for_a_code_server_that_takes_them(
    tmp_path: Path, layout: str | None, text: str, expected: bool
) -> None:
    binary = _script(tmp_path / "bin" / "code-server", "exit 0\n")
    if layout is not None:
        (tmp_path / layout).parent.mkdir(parents=True)
        (tmp_path / layout).write_text(text)
    assert takes_login_strings(binary) is expected


def test_url_host() -> None:
    assert url_host("127.0.0.1") == "127.0.0.1"
    assert url_host("0.0.0.0") == "127.0.0.1"
    assert url_host("::1") == "[::1]"
    assert url_host("localhost") == "localhost"


# -- failures, with a stand-in binary -----------------------------------------------


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


async def test_a_binary_that_exits_is_reported_with_its_output(tmp_path: Path) -> None:
    binary = _script(tmp_path / "code-server", "echo 'cannot start: boom' >&2\nexit 3\n")
    server = CodeServer(binary, workspace=tmp_path, bind="127.0.0.1", port=0,
                        data_dir=tmp_path / "d", password=PASSWORD)
    with pytest.raises(CodeServerStartError, match="(?s)exited with 3.*cannot start: boom"):
        await server.start(timeout=30)
    await server.stop()


async def test_a_binary_that_never_listens_is_stopped(tmp_path: Path) -> None:
    binary = _script(tmp_path / "code-server", "sleep 300 &\nsleep 300\n")
    server = CodeServer(binary, workspace=tmp_path, bind="127.0.0.1", port=0,
                        data_dir=tmp_path / "d", password=PASSWORD, stop_grace=2)
    with pytest.raises(CodeServerStartError, match="did not start listening"):
        await server.start(timeout=1)
    assert code_server_processes(server) == []


# -- the real code-server -------------------------------------------------------------


@pytest.mark.codeserver
async def test_starts_ready_on_loopback_with_a_password(
    code_server_factory: Factory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config_home = tmp_path / "xdg-config"
    server = code_server_factory(env={"XDG_CONFIG_HOME": str(config_home)})
    with caplog.at_level(logging.DEBUG, logger="server_bootstrap"):
        await server.start()
    assert server.url.startswith("http://127.0.0.1:") and server.pid is not None
    # No browser asked yet, and code-server has loaded its VS Code server (which logs that
    # its agent started): the first page does not wait for it.
    agent_logs = server.data_dir / "user-data" / "logs"
    await eventually(lambda: any("Extension host agent started" in log.read_text()
                                 for log in agent_logs.rglob("remoteagent.log")), timeout=60)
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    assert port != 0
    async with aiohttp.ClientSession() as client:
        async with client.get(f"{server.url}healthz") as response:
            assert response.status == 200
            assert (await response.json())["status"] in ("alive", "expired")
        async with client.get(server.url, allow_redirects=False) as response:
            assert response.status == 302 and response.headers["Location"] == "./login"
        async with client.get(f"{server.url}login") as response:
            page = await response.text()
            assert "podcode attach" in page and "$PASSWORD" not in page  # podcode's hint
        async with client.post(f"{server.url}login", data={"password": "wrong"},
                               allow_redirects=False) as response:
            assert response.status == 200 and "Incorrect password" in await response.text()
            assert "code-server-session" not in response.cookies
        async with client.post(f"{server.url}login", data={"password": PASSWORD},
                               allow_redirects=False) as response:
            assert response.status == 302 and "code-server-session" in response.cookies
    # The password (or its hash, which code-server takes as the login cookie) is in no
    # command line, environment or log line, and in no file once code-server listens;
    # nothing went to ~/.config.
    digest = hashlib.sha256(PASSWORD.encode()).hexdigest()
    processes = code_server_processes(server)
    assert len(processes) >= 2  # the launcher and the server it forked, at least
    for proc in processes:
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert b"PASSWORD" not in environ and digest.encode() not in environ
        assert PASSWORD not in " ".join(proc.cmdline())
    assert PASSWORD not in caplog.text and digest not in caplog.text
    data_dir = server.data_dir
    assert not list(data_dir.glob("config*.yaml"))
    assert all(digest.encode() not in f.read_bytes() for f in data_dir.rglob("*") if f.is_file())
    assert not config_home.exists()
    # Listening on 127.0.0.1 only: not reachable on the machine's other addresses.
    listening = {c.laddr.ip for proc in code_server_processes(server)
                 for c in _connections(proc) if c.status == psutil.CONN_LISTEN
                 and c.laddr.port == port}
    assert listening == {"127.0.0.1"}
    for address in _other_addresses():
        with pytest.raises(OSError), socket.create_connection((address, port), timeout=5):
            pass


def _connections(proc: psutil.Process) -> list[Any]:
    try:
        return list(proc.net_connections(kind="inet"))
    except psutil.Error:
        return []


def _other_addresses() -> list[str]:
    return [a.address for addresses in psutil.net_if_addrs().values() for a in addresses
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


@pytest.mark.codeserver
async def test_auth_none_needs_no_login(code_server_factory: Factory) -> None:
    server = code_server_factory(password=None)
    await server.start()
    async with aiohttp.ClientSession() as client, client.get(
        server.url, allow_redirects=False
    ) as response:
        assert response.status in (200, 302)
        assert not response.headers.get("Location", "").startswith("./login")


@pytest.mark.codeserver
async def test_stop_leaves_no_process(code_server_factory: Factory) -> None:
    server = code_server_factory()
    await server.start()
    tree = code_server_processes(server)
    pgid = os.getpgid(server.pid or 0)
    assert server.pid in [p.pid for p in tree] and len(tree) >= 2  # launcher + server
    assert sorted(server.pids()) == sorted(p.pid for p in tree)
    assert pgid != os.getpgid(0)  # its own process group
    await server.stop()
    assert code_server_processes(server) == []
    assert [p for p in psutil.process_iter() if _pgid(p) == pgid] == []
    await server.stop()  # twice is fine


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None


@pytest.mark.codeserver
async def test_a_crash_is_restarted_then_given_up(code_server_factory: Factory) -> None:
    server = code_server_factory(max_restarts=1)
    await server.start()
    url, first = server.url, server.pid
    supervisor = asyncio.create_task(server.supervise())
    os.kill(first or 0, signal.SIGKILL)  # the launcher dies; its children must not linger
    await eventually(lambda: server.ready and server.restarts == 1, poll=0.05)
    assert server.pid != first
    await _healthy(server.url)
    assert server.url == url
    assert not psutil.pid_exists(first or 0) or _is_zombie(first or 0)
    os.kill(server.pid or 0, signal.SIGKILL)
    with pytest.raises(CodeServerStartError, match="restarted 1 times"):
        await asyncio.wait_for(supervisor, timeout=60)
    assert code_server_processes(server) == []


@pytest.mark.codeserver
async def test_supervise_returns_after_stop(code_server_factory: Factory) -> None:
    server = code_server_factory()
    await server.start()
    supervisor = asyncio.create_task(server.supervise())
    await asyncio.sleep(0)
    await server.stop()
    await asyncio.wait_for(supervisor, timeout=30)
    assert server.restarts == 0 and code_server_processes(server) == []


async def _healthy(url: str) -> None:
    async with aiohttp.ClientSession() as client, client.get(f"{url}healthz") as response:
        assert response.status == 200


def _is_zombie(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return True


def test_user_settings_defaults_keep_the_users_values(tmp_path: Path) -> None:
    settings = tmp_path / "User" / "settings.json"
    write_user_settings(settings, {"telemetry.telemetryLevel": "off", "a": 1})
    assert json.loads(settings.read_text()) == {"telemetry.telemetryLevel": "off", "a": 1}
    settings.write_text(json.dumps({"a": 2, "editor.fontSize": 15}))
    write_user_settings(settings, {"telemetry.telemetryLevel": "off", "a": 1})
    assert json.loads(settings.read_text()) == {"telemetry.telemetryLevel": "off", "a": 2,
                                                "editor.fontSize": 15}
    commented = '{\n  // mine\n  "a": 3\n}\n'
    settings.write_text(commented)
    write_user_settings(settings, {"a": 1})
    assert settings.read_text() == commented
    assert USER_SETTINGS["telemetry.telemetryLevel"] == "off"
    assert USER_SETTINGS["update.mode"] == "none"


async def test_supervise_before_start_is_an_error(tmp_path: Path) -> None:
    server = CodeServer(Path("code-server"), workspace=tmp_path, bind="127.0.0.1", port=0,
                        data_dir=tmp_path / "d", password=None)
    with pytest.raises(CodeServerStartError, match="call start"):
        await server.supervise()
    assert server.pids() == [] and not server.ready


FAKE_SERVER = """#!{python}
import http.server, pathlib, sys
here = pathlib.Path(sys.argv[0]).parent
if (here / "broken").exists():
    print("cannot start: broken", flush=True)
    sys.exit(2)
bind = sys.argv[sys.argv.index("--bind-addr") + 1]
host, port = bind.rsplit(":", 1)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(here / "requests", "a") as out:
            out.write(self.path + "\\n")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{{"status": "alive"}}')

    def log_message(self, *args):
        pass

server = http.server.HTTPServer((host, int(port)), Handler)
print(f"HTTP server listening on http://{{host}}:{{server.server_port}}/", flush=True)
server.serve_forever()
"""


async def test_restarts_that_fail_count_until_given_up(tmp_path: Path) -> None:
    """A stand-in server: starts, is killed, then cannot start again; supervise tries
    max_restarts times and gives up with the last output."""
    binary = tmp_path / "code-server"
    binary.write_text(FAKE_SERVER.format(python=sys.executable))
    binary.chmod(0o755)
    server = CodeServer(binary, workspace=tmp_path, bind="127.0.0.1", port=0,
                        data_dir=tmp_path / "d", password=PASSWORD, max_restarts=2,
                        restart_delay=0.0)
    try:
        await server.start()
        first_url = server.url
        supervisor = asyncio.create_task(server.supervise())
        os.kill(server.pid or 0, signal.SIGKILL)
        await eventually(lambda: server.restarts == 1 and server.ready, poll=0.05)
        assert server.url == first_url
        (tmp_path / "broken").touch()
        os.kill(server.pid or 0, signal.SIGKILL)
        with pytest.raises(CodeServerStartError, match="(?s)restarted 2 times.*broken"):
            await asyncio.wait_for(supervisor, timeout=60)
        assert server.restarts == 2 and not server.ready
    finally:
        await server.stop()
    assert code_server_processes(server) == []


async def test_once_healthy_it_has_code_server_load_its_vs_code_server(tmp_path: Path) -> None:
    """code-server loads its VS Code server at the first request for /, signed in or not:
    the launch asks for / once /healthz answers, and does not wait for the answer."""
    binary = tmp_path / "code-server"
    binary.write_text(FAKE_SERVER.format(python=sys.executable))
    binary.chmod(0o755)
    server = CodeServer(binary, workspace=tmp_path, bind="127.0.0.1", port=0,
                        data_dir=tmp_path / "d", password=PASSWORD)
    requests = tmp_path / "requests"
    try:
        await server.start()
        await eventually(lambda: requests.exists() and "/" in requests.read_text().split())
        seen = requests.read_text().split()
        assert seen[-1] == "/" and set(seen[:-1]) == {"/healthz"}
    finally:
        await server.stop()


@pytest.mark.codeserver
async def test_no_ide_process_sees_the_smtp_password(
    code_server_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's process reads PODCODE_SMTP_URL; code-server, its extension host and the
    terminals it starts never get it (and a password file is the way not to have it in any
    environment at all)."""
    monkeypatch.setenv("PODCODE_SMTP_URL", "smtp://mailer:hunter2-secret@127.0.0.1:25")
    server = code_server_factory()
    await server.start()
    processes = await eventually(lambda: code_server_processes(server) or None)
    for process in processes:
        environ = Path(f"/proc/{process.pid}/environ").read_bytes()
        assert b"hunter2-secret" not in environ and b"PODCODE_SMTP_URL" not in environ


def test_the_smtp_password_can_come_from_a_file(tmp_path: Path) -> None:
    from interactive.base.errors import SettingError
    from interactive.base.smtp import smtp_config

    secret = tmp_path / "password"
    secret.write_text("from-a-secret\n")
    url = "smtp://mailer@mail.example.com:587?starttls=true"
    config = smtp_config(url, {"PODCODE_SMTP_PASSWORD_FILE": str(secret)})
    assert (config.username, config.password) == ("mailer", "from-a-secret")
    assert smtp_config(url, {}).password is None
    with pytest.raises(SettingError, match="cannot read it"):
        smtp_config(url, {"PODCODE_SMTP_PASSWORD_FILE": str(tmp_path / "missing")})
