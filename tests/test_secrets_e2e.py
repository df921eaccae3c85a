"""Where a session's secrets are not: a real failing task with the real code-server, its
token and password looked for in every process's environment and in everything it printed
(with podcode's logging at DEBUG), after good, wrong and malformed requests."""

from __future__ import annotations

import hashlib
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.session_fixture import Job

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
