"""The SSH endpoint's decisions, the desktop routes of the control API and the CLI's
config, each on its own (the real ssh client drives them together in test_ssh.py)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
import pytest

from interactive.base.errors import SettingError
from interactive.base.loop import LoopThread
from interactive.base.ports import listen_socket
from interactive.base.record import RecordError, SessionRecord
from interactive.base.settings import build_settings
from interactive.base.state import SessionState
from interactive.cli import split_command
from interactive.cli.control_cmds import pushed_files
from interactive.cli.errors import CliError
from interactive.cli.ssh_cmd import alias_of, config_block, pin, proxy_argv
from interactive.doors.desktop import Desktop, Refused, decode_files, inside
from interactive.doors.ssh import (
    Activity,
    KeyError_,
    SshEndpoint,
    authorized_keys_from,
    command_line,
    parse_keys,
    task_environ,
)
from interactive.doors.ssh_start import NOT_INSTALLED, record_fields, start_ssh
from tests.cli_fixture import Controls, served_api

KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


# -- keys ------------------------------------------------------------------------------


def test_authorized_keys_come_as_text_or_from_a_file_and_a_bad_line_is_named(
    tmp_path: Path,
) -> None:
    text = f"# laptop\n\n{KEY}\n"
    assert [k.public_data for k in parse_keys(text, "x")] == [
        asyncssh.import_public_key(KEY).public_data]
    assert len(authorized_keys_from(KEY)) == 1
    path = tmp_path / "authorized_keys"
    path.write_text(text)
    assert len(authorized_keys_from(str(path))) == 1
    assert authorized_keys_from(None) == []
    with pytest.raises(KeyError_, match=r"authorized_keys, line 2: not an OpenSSH public key"):
        parse_keys(f"{KEY}\nssh-ed25519 not-base64\n", str(path))
    with pytest.raises(KeyError_, match="cannot read .*missing"):
        authorized_keys_from(str(tmp_path / "missing"))


def test_an_endpoint_accepts_the_keys_it_was_given_and_pushed_ones_up_to_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = asyncssh.import_public_key(KEY)
    other = asyncssh.generate_private_key("ssh-ed25519")
    endpoint = SshEndpoint(listen_socket("127.0.0.1", 0), workspace=tmp_path, environ={},
                           activity=Activity(lambda: None, lambda: 0.0), keys=[given])
    try:
        assert endpoint.accepts(given) and not endpoint.accepts(other)
        assert endpoint.authorize(other).startswith("SHA256:")
        assert endpoint.accepts(other)
        assert endpoint.host_public_key.startswith("ssh-ed25519 AAAA")
        monkeypatch.setattr("interactive.doors.ssh.MAX_KEYS", 2)
        with pytest.raises(KeyError_, match="already accepts 2 keys"):
            endpoint.authorize(asyncssh.generate_private_key("ssh-ed25519"))
        endpoint.authorize(given)  # one it has is no new key
    finally:
        endpoint._sock.close()


async def test_only_connections_still_logging_in_count_against_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the bound at 2: two silent connections fill it and a key login is refused; a
    logged-in connection does not count, and a closed one frees its place."""
    monkeypatch.setattr("interactive.doors.ssh.MAX_UNAUTHENTICATED", 2)
    user = asyncssh.generate_private_key("ssh-ed25519")
    endpoint = SshEndpoint(listen_socket("127.0.0.1", 0), workspace=tmp_path, environ={},
                           activity=Activity(lambda: None, lambda: 0.0),
                           keys=[user.convert_to_public()])
    await endpoint.start()

    def login() -> Any:
        return asyncssh.connect("127.0.0.1", endpoint.port, username="me", client_keys=[user],
                                known_hosts=None, agent_path=None)

    try:
        silent = [await asyncio.open_connection("127.0.0.1", endpoint.port) for _ in range(2)]
        await silent[0][0].readline()  # the server's version line: it took them both
        await silent[1][0].readline()
        with pytest.raises((asyncssh.DisconnectError, ConnectionError)):
            async with login():
                pass
        silent[0][1].close()
        await silent[0][1].wait_closed()
        while len(endpoint._logging_in) > 1:  # until the server has seen it close
            await asyncio.sleep(0.01)
        async with login() as first:
            async with login() as second:  # the first logged in: it takes no place
                assert (await second.run("true")).exit_status == 0
            assert (await first.run("true")).exit_status == 0
    finally:
        for _, writer in silent:
            writer.close()
        await endpoint.stop(0)


# -- activity --------------------------------------------------------------------------


def test_events_count_at_once_and_forwarded_bytes_only_above_a_trickle() -> None:
    now = [0.0]
    touches: list[float] = []
    activity = Activity(lambda: touches.append(now[0]), lambda: now[0], trickle_bytes=1000,
                        window_seconds=60)
    activity.event("login")
    assert touches == [0.0]
    for second in range(0, 60, 5):  # an editor's heartbeat: 12 x 50 bytes a minute
        now[0] = 100.0 + second
        assert not activity.forwarded(50)
    assert touches == [0.0]
    now[0] = 200.0  # a new window: someone types, the editor sends a burst
    assert not activity.forwarded(600)
    assert activity.forwarded(600)
    assert touches == [0.0, 200.0]


# -- what runs -------------------------------------------------------------------------


def test_commands_run_with_the_tasks_python_first_and_no_secret() -> None:
    python = "/opt/task/bin/python"
    env = task_environ({"PATH": "/usr/bin:/opt/task/bin", "PODCODE_SMTP_URL": "smtp://u:p@h",
                        "PASSWORD": "x", "HOME": "/home/u"}, "12-34", python)
    assert env["PATH"] == "/opt/task/bin:/usr/bin"
    assert env["PODCODE_SESSION_ID"] == "12-34" and env["HOME"] == "/home/u"
    assert "PODCODE_SMTP_URL" not in env and "PASSWORD" not in env
    assert command_line("/bin/bash", "ls -l", False) == ["/bin/bash", "-c", "ls -l"]
    assert command_line("/bin/bash", None, True) == ["/bin/bash", "-i"]  # not a login shell
    assert command_line("/bin/sh", None, False) == ["/bin/sh"]


# -- settings and record ---------------------------------------------------------------


def test_ssh_settings_are_checked_and_overridable() -> None:
    settings = build_settings({"ssh_port": 2200}, {"PODCODE_SSH": "0"})
    assert settings.ports.ssh_port == 2200 and settings.editor.ssh is False
    assert build_settings({}, {}).editor.ssh is True
    assert build_settings({}, {"PODCODE_SSH_AUTHORIZED_KEYS": KEY}).editor.ssh_authorized_keys \
        == KEY
    with pytest.raises(SettingError, match="ssh_port"):
        build_settings({}, {"PODCODE_SSH_PORT": "70000"})
    with pytest.raises(SettingError, match="ssh"):
        build_settings({"ssh": "maybe"}, {})


def test_the_record_keeps_the_ssh_port_and_host_key_and_refuses_a_bad_port() -> None:
    record = SessionRecord(state="waiting", task="t", control_url="http://127.0.0.1:1",
                           token="k", ssh_port=2222, ssh_host_key=KEY)
    data = record.to_json()
    assert data["ssh"] == {"port": 2222, "host_key": KEY}
    back = SessionRecord.from_json(data, "x")
    assert (back.ssh_port, back.ssh_host_key) == (2222, KEY)
    with pytest.raises(RecordError, match=r"ssh.port 99999 is not a port"):
        SessionRecord.from_json({**data, "ssh": {"port": 99999}}, "x")
    assert "ssh" not in SessionRecord(state="waiting", task="t", control_url="http://h:1",
                                      token="k").to_json()


def test_a_session_without_ssh_or_without_asyncssh_says_so_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = LoopThread()
    try:
        state = SessionState("t")
        off = build_settings({"ssh": False, "ssh_port": 0}, {})
        assert start_ssh(loop, off, bind="127.0.0.1", port=0, workspace=tmp_path,
                         session="1-2", state=state) is None
        monkeypatch.setitem(sys.modules, "interactive.doors.ssh", None)  # not installed
        monkeypatch.delattr("interactive.doors.ssh")
        default = build_settings({"ssh_port": 0}, {})
        assert start_ssh(loop, default, bind="127.0.0.1", port=0, workspace=tmp_path,
                         session="1-2", state=state) is None
        assert state.notes == []
        named = build_settings({"ssh": True}, {})
        start_ssh(loop, named, bind="127.0.0.1", port=0, workspace=tmp_path, session="1-2",
                  state=state)
        assert state.notes == [NOT_INSTALLED]
        assert record_fields(None) == {}
    finally:
        loop.stop()


def test_unreadable_authorized_keys_are_a_note_and_ssh_still_serves(tmp_path: Path) -> None:
    loop = LoopThread()
    state = SessionState("t")
    settings = build_settings({"ssh_authorized_keys": str(tmp_path / "nope")}, {})
    endpoint = start_ssh(loop, settings, bind="127.0.0.1", port=0, workspace=tmp_path,
                         session="1-2", state=state)
    try:
        assert endpoint is not None and endpoint.port > 0
        assert record_fields(endpoint)["ssh_port"] == endpoint.port
        assert any("accepts only the keys podcode ssh pushes" in note and "nope" in note
                   for note in state.notes)
    finally:
        if endpoint is not None:
            loop.call(endpoint.stop(), 10)
        loop.stop()


# -- pushed files ----------------------------------------------------------------------


def test_pushed_paths_stay_inside_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, workspace / "link")
    assert inside(workspace, "pkg/train.py") == (workspace / "pkg" / "train.py").resolve()
    for bad, why in [("/etc/passwd", "relative"), ("../x.py", "without '..'"),
                     ("pkg/../../x.py", "without '..'"), ("", "relative"),
                     ("link/x.py", "leads outside"), (".", "leads outside")]:
        with pytest.raises(Refused, match=why):
            inside(workspace, bad)


def test_a_push_body_is_checked_whole_before_anything_is_written(tmp_path: Path) -> None:
    good = base64.b64encode(b"x = 1\n").decode()
    assert decode_files({"files": {"a.py": good}}, tmp_path) == {
        (tmp_path / "a.py").resolve(): b"x = 1\n"}
    for body, why in [({}, "expected"), ({"files": {"a.py": 3}}, "base64 string"),
                      ({"files": {"a.py": "!!"}}, "not base64"),
                      ({"files": {"a.py": good, "../b.py": good}}, "without")]:
        with pytest.raises(Refused, match=why):
            decode_files(body, tmp_path)
    assert not (tmp_path / "a.py").exists()


@pytest.fixture
async def desktop_api(tmp_path: Path) -> Any:
    endpoint: list[Any] = [None]
    editors = Desktop(tmp_path, lambda: endpoint[0])
    async with served_api(Controls("waiting"), editors=editors) as (client, url):
        yield client, endpoint, url


async def test_the_desktop_routes_need_the_token_write_files_and_take_keys(
    desktop_api: Any, tmp_path: Path
) -> None:
    client, endpoint, url = desktop_api
    async with aiohttp.ClientSession(url) as anonymous:
        for path in ("/api/files", "/api/ssh-key"):
            async with anonymous.post(path, json={}) as response:
                assert response.status == 401
    (tmp_path / "train.py").write_text("old\n")
    (tmp_path / "train.py").chmod(0o755)
    files = {"train.py": base64.b64encode(b"new\n").decode(),
             "pkg/new.py": base64.b64encode(b"y = 2\n").decode()}
    async with client.post("/api/files", json={"files": files}) as response:
        assert response.status == 200
        assert len((await response.json())["written"]) == 2
    assert (tmp_path / "train.py").read_text() == "new\n"
    assert (tmp_path / "train.py").stat().st_mode & 0o777 == 0o755  # its mode kept
    assert (tmp_path / "pkg" / "new.py").read_text() == "y = 2\n"
    async with client.post("/api/files", json={"files": {"../x": files["train.py"]}}) as response:
        assert response.status == 400
        assert "without '..'" in (await response.json())["error"]

    async with client.post("/api/ssh-key", json={"key": KEY}) as response:
        assert response.status == 409  # no SSH endpoint in this session
        assert "serves no SSH" in (await response.json())["error"]
    ssh = SshEndpoint(listen_socket("127.0.0.1", 0), workspace=tmp_path, environ={},
                      activity=Activity(lambda: None, lambda: 0.0))
    endpoint[0] = ssh
    try:
        async with client.post("/api/ssh-key", json={"key": "ssh-rsa nonsense"}) as response:
            assert response.status == 400
        async with client.post("/api/ssh-key", json={"key": KEY}) as response:
            assert response.status == 200
            answer = await response.json()
        assert answer["host_key"] == ssh.host_public_key and answer["port"] == ssh.port
        assert ssh.accepts(asyncssh.import_public_key(KEY))
    finally:
        ssh._sock.close()


async def test_a_push_over_the_bound_is_refused_as_it_arrives(
    desktop_api: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    client, _, _ = desktop_api
    monkeypatch.setattr("interactive.doors.desktop.MAX_PUSH_BYTES", 1024)
    big = base64.b64encode(b"x" * 4096).decode()
    async with client.post("/api/files", json={"files": {"big.py": big}}) as response:
        assert response.status == 400
        assert "over 1 KiB" in (await response.json())["error"]
    assert not (tmp_path / "big.py").exists()


# -- the CLI ---------------------------------------------------------------------------


def _args(**given: Any) -> argparse.Namespace:
    base = dict(pod=None, alias=None, session=None, namespace=None, context=None,
                kubeconfig=None, container=None, task=None, pid=None)
    return argparse.Namespace(**{**base, **given})


def test_the_config_block_reaches_the_same_session_and_pins_its_host_key(tmp_path: Path) -> None:
    args = _args(pod="train-0", namespace="ml", session="7-8")
    alias = alias_of(args)
    assert alias == "podcode-train-0-7-8"
    assert proxy_argv(args, alias, tmp_path) == [
        sys.executable, "-m", "interactive.cli", "ssh-proxy", "train-0", "--namespace", "ml",
        "--session", "7-8", "--alias", alias]
    local = proxy_argv(_args(), "podcode-local", tmp_path / "my home")
    assert local[:2] == ["env", f"PODCODE_HOME={tmp_path / 'my home'}"]
    block = config_block("podcode-x", [*local, "--task", "a%b"], tmp_path / "k ey",
                         tmp_path / "known")
    assert block.startswith("Host podcode-x\n")
    assert "a%%b" in block  # ssh's % tokens escaped
    assert f'IdentityFile "{tmp_path / "k ey"}"' in block
    assert "StrictHostKeyChecking yes" in block and "HostKeyAlias podcode-x" in block

    known = tmp_path / "known_hosts"
    pin(known, "podcode-a", "ssh-ed25519 AAAA1")
    pin(known, "podcode-b", "ssh-ed25519 BBBB")
    pin(known, "podcode-a", "ssh-ed25519 AAAA2")
    assert sorted(known.read_text().splitlines()) == [
        "podcode-a ssh-ed25519 AAAA2", "podcode-b ssh-ed25519 BBBB"]
    assert known.stat().st_mode & 0o777 == 0o600


def test_only_podcode_ssh_takes_a_command_after_the_double_dash() -> None:
    assert split_command(["ssh", "pod", "--", "ls", "-l"]) == (["ssh", "pod"], ["ls", "-l"])
    assert split_command(["status"]) == (["status"], None)


def test_push_takes_files_inside_the_local_root_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("x\n")
    assert pushed_files([str(tmp_path / "src" / "train.py")], str(tmp_path)) == {
        "src/train.py": b"x\n"}
    with pytest.raises(CliError, match="not inside --local-root"):
        pushed_files(["/etc/hostname"], str(tmp_path))
    with pytest.raises(CliError, match="missing.py"):
        pushed_files([str(tmp_path / "missing.py")], str(tmp_path))
    monkeypatch.setattr("interactive.cli.control_cmds.MAX_PUSH_BYTES", 1)
    with pytest.raises(CliError, match="in all"):
        pushed_files([str(tmp_path / "src" / "train.py")], str(tmp_path))
