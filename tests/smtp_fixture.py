"""A real SMTP server for tests (aiosmtpd on 127.0.0.1, a free port).

Fixtures:

- ``smtp_server``: plain SMTP, no authentication; ``.url``, ``.messages``,
  ``.wait_for(n)``.
- ``make_smtp_server(tls=None|"starttls"|"smtps", users={"name": "password"})``:
  servers with TLS and/or AUTH, stopped at the end of the test.
- ``smtp_tls_cert``: a self-signed certificate for 127.0.0.1 (cert, key)
  made with the ``openssl`` command; the test is skipped without it.
"""

from __future__ import annotations

import email
import email.policy
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class SmtpServer:
    """A running server and the messages it received (parsed, newest last)."""

    port: int
    tls: str | None = None
    users: dict[str, str] = field(default_factory=dict)
    messages: list[EmailMessage] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        scheme = "smtps" if self.tls == "smtps" else "smtp"
        auth = ""
        if self.users:
            name, password = next(iter(self.users.items()))
            auth = f"{quote(name, safe='')}:{quote(password, safe='')}@"
        query = "?starttls=true" if self.tls == "starttls" else ""
        return f"{scheme}://{auth}{HOST}:{self.port}{query}"

    def wait_for(self, count: int, timeout: float = 20.0) -> list[EmailMessage]:
        """Block until ``count`` messages arrived; returns them (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.messages) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} emails, got {len(self.messages)}")
                self._cond.wait(left)
            return list(self.messages)

    # aiosmtpd handler hooks
    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self._cond:
            self.messages.append(message)
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
            self._cond.notify_all()
        return "250 Message accepted for delivery"

    def authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        if isinstance(data, LoginPassword):
            name, password = data.login.decode(), data.password.decode()
            if self.users.get(name) == password:
                self.logins.append(name)
                return AuthResult(success=True)
        return AuthResult(success=False, handled=False)


def _server_context(cert: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def start_server(
    tls: str | None = None,
    users: dict[str, str] | None = None,
    cert: tuple[Path, Path] | None = None,
    port: int | None = None,
) -> tuple[SmtpServer, Controller]:
    """Start a server (stop it with ``controller.stop()``)."""
    server = SmtpServer(port=port or free_port(), tls=tls, users=dict(users or {}))
    kwargs: dict[str, Any] = {}
    if users:
        kwargs.update(authenticator=server.authenticate, auth_require_tls=tls is not None)
    if tls == "starttls":
        assert cert is not None
        kwargs.update(tls_context=_server_context(cert), require_starttls=True)
    if tls == "smtps":
        assert cert is not None
        kwargs.update(ssl_context=_server_context(cert))
    controller = Controller(server, hostname=HOST, port=server.port, **kwargs)
    controller.start()
    return server, controller


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    server, controller = start_server()
    try:
        yield server
    finally:
        controller.stop()


@pytest.fixture
def make_smtp_server(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., SmtpServer]]:
    controllers: list[Controller] = []

    def make(tls: str | None = None, users: dict[str, str] | None = None) -> SmtpServer:
        cert = request.getfixturevalue("smtp_tls_cert") if tls else None
        server, controller = start_server(tls, users, cert)
        controllers.append(controller)
        return server

    try:
        yield make
    finally:
        for controller in controllers:
            controller.stop()


@pytest.fixture(scope="session")
def smtp_tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("smtp-tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


def client_context(cert: tuple[Path, Path]) -> ssl.SSLContext:
    """A client context that trusts the test certificate (and checks the host name)."""
    return ssl.create_default_context(cafile=str(cert[0]))
