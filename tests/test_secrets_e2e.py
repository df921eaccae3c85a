"""Where a session's secrets are not: a real failing task with the real code-server, its
token and password looked for in every process's environment and in everything it printed
(with podcode's logging at DEBUG), after good, wrong and malformed requests."""

from __future__ import annotations

import hashlib
import shutil
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from server_bootstrap import extensions
from tests.session_fixture import Job
from tests.ssh_fixture import openssh, ssh_config

pytestmark = pytest.mark.codeserver

JOB = """
import logging
import sys

from interactive import vscode

logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                    format="%(levelname)s %(name)s: %(message)s")

@vscode(port=0, control_port=0, debug_port=0)
def train(lr):
    raise ValueError(f"diverged at lr={lr}")

if __name__ == "__main__":
    train(0.1)
"""


def environ_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""  # it ended meanwhile


def raw_request(url: str, request: bytes) -> bytes:
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def login(url: str, password: str) -> int:
    data = urllib.parse.urlencode({"password": password}).encode()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(f"{url}login", data, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_token_and_password_are_in_no_environment_and_no_output(job: Job) -> None:
    job.write("job.py", JOB)
    record = job.start().wait_state("waiting", timeout=120)
    token, password = record["token"], record["password"]
    assert record["code_server_url"] and token and password
    secrets = [token.encode(), password.encode(),
               hashlib.sha256(password.encode()).hexdigest().encode()]

    # Requests that reach the control API and code-server, good and bad.
    assert job.api("GET", "/api/status")[0] == 200
    assert job.api("GET", "/api/status", token="wrong")[0] == 401
    malformed = raw_request(
        record["control_url"],
        b"GET /api/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
        + b"\x00\r\nConnection: close\r\n\r\n",
    )
    assert malformed.startswith(b"HTTP/1.0 400")
    assert login(record["code_server_url"], "wrong") == 200  # the page again, with an error
    assert login(record["code_server_url"], password) == 302  # logged in

    assert job.proc is not None
    task = psutil.Process(job.proc.pid)
    children = task.children(recursive=True)
    names = {proc.name() for proc in children}
    assert len(children) >= 2, names  # code-server's launcher and the server it forked
    for proc in [task, *children]:
        environ = environ_of(proc.pid)
        for secret in secrets:
            assert secret not in environ, f"a secret in the environment of {proc.cmdline()}"
        assert b"PODCODE_TOKEN=" not in environ and b"\0PASSWORD=" not in environ

    assert job.api("POST", "/api/abort")[0] == 202
    assert job.wait_exit() != 0  # the task's own exception
    output = job.output().encode()
    assert b"ValueError: diverged at lr=0.1" in output
    assert b"DEBUG interactive." in output  # podcode's logging was on, all of it
    assert b"malformed request from 127.0.0.1 answered 400" in output
    for secret in secrets:
        assert secret not in output


SMTP_URL = "smtp://ana:hunter2-smtp@127.0.0.1:2525"
SSH_JOB = JOB.replace("@vscode(port=0, control_port=0, debug_port=0)",
                      "@vscode(port=0, control_port=0, debug_port=0, ssh_port=0)")


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The laptop's config folder: podcode's key pair and pinned host keys go there."""
    folder = tmp_path / "laptop-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    return folder


def holds_smtp_url(environ: bytes) -> bool:
    return b"hunter2-smtp" in environ or b"PODCODE_SMTP_URL=" in environ


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
@pytest.mark.usefixtures("xdg")
def test_the_smtp_url_is_in_no_process_podcode_starts(job: Job, tmp_path: Path) -> None:
    """Issue 34: the SMTP URL and its password were readable in /proc/<pid>/environ of the
    watchdog by anyone who could ssh into the session (the same user)."""
    job.write("job.py", SSH_JOB)
    job.start(env={"PODCODE_SMTP_URL": SMTP_URL}).wait_state("waiting", timeout=120)
    assert job.proc is not None
    task = psutil.Process(job.proc.pid)
    assert holds_smtp_url(environ_of(task.pid))  # the task's own: it was started with it
    children = task.children(recursive=True)
    lines = {proc.pid: " ".join(proc.cmdline()) for proc in children}
    assert any("interactive.session.watchdog" in line for line in lines.values()), lines
    assert any("code-server" in line for line in lines.values()), lines
    for proc in children:
        assert not holds_smtp_url(environ_of(proc.pid)), f"the SMTP URL in {lines[proc.pid]}"

    config = ssh_config(tmp_path)  # a shell over SSH: its own environment and its parent's
    shell = openssh("ssh", config, "podcode-local", "cat /proc/$$/environ; echo; env")
    assert shell.returncode == 0, shell.stderr
    assert "PODCODE_SESSION_ID=" in shell.stdout  # it did print its environment
    assert "hunter2-smtp" not in shell.stdout and "PODCODE_SMTP_URL" not in shell.stdout
    assert job.api("POST", "/api/abort")[0] == 202
    assert job.wait_exit() != 0


def test_code_servers_extension_installs_get_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``code-server --install-extension`` runs before code-server starts: a process of
    its own, which got the task's whole environment."""
    dump = tmp_path / "environ"
    binary = tmp_path / "code-server"
    binary.write_text(f"#!/bin/sh\ncat /proc/$$/environ > {dump}\necho '[]'\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PODCODE_SMTP_URL", SMTP_URL)
    monkeypatch.setenv("PASSWORD", "code-server-login")
    monkeypatch.setenv("PODCODE_KEPT", "yes")
    extensions._run_cli(binary, tmp_path / "extensions", ["--list-extensions"])
    environ = dump.read_bytes()
    assert b"PODCODE_KEPT=yes" in environ
    assert not holds_smtp_url(environ) and b"code-server-login" not in environ
