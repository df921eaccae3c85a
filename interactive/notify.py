"""Email to the session's owner over SMTP: the idle warning and the cleanup report.

Configured by ``PODCODE_SMTP_URL`` (``smtp://user:pass@host:port``,
``smtps://...`` for TLS from the start, ``?starttls=true`` to upgrade a plain
connection) and ``PODCODE_MAIL_FROM``. A server that is down is retried with
exponential backoff; a mail that still cannot be sent is logged (never with
the password) and sending returns False: it never raises to the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import smtplib
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from interactive.errors import SettingError
from interactive.loop import mark_service_thread
from interactive.state import SessionState
from interactive.types import Environ
from vscode_config.mail import FinalMail, Rendered, WarningMail, render_final, render_warning

logger = logging.getLogger(__name__)

SMTP_URL_ENV = "PODCODE_SMTP_URL"
MAIL_FROM_ENV = "PODCODE_MAIL_FROM"
OWNER_ENV = "PODCODE_OWNER"
DEFAULT_PORTS = {"smtp": 25, "smtps": 465}
STARTTLS_PORT = 587
_SAID: set[str] = set()
"""Configuration problems already logged by this process (each is said once)."""


class Notifier(Protocol):
    """Sends the owner's emails; returns whether the mail went out, never raises."""

    async def send_warning(self, mail: WarningMail) -> bool: ...

    async def send_final(self, mail: FinalMail) -> bool: ...


@dataclass(frozen=True)
class SmtpConfig:
    """Where and how to send mail (from ``PODCODE_SMTP_URL``)."""

    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: bool = False
    """TLS from the first byte (``smtps://``)."""
    starttls: bool = False
    """Upgrade a plain connection with STARTTLS (``?starttls=true``)."""
    timeout_seconds: float = 30.0
    """Per connection attempt (``?timeout=``)."""

    @property
    def safe_url(self) -> str:
        """The URL without the password, for logs and messages."""
        user = f"{self.username}@" if self.username else ""
        scheme = "smtps" if self.ssl else "smtp"
        query = "?starttls=true" if self.starttls else ""
        return f"{scheme}://{user}{self.host}:{self.port}{query}"


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def parse_smtp_url(url: str) -> SmtpConfig:
    """``smtp[s]://[user[:password]@]host[:port][?starttls=true&timeout=30]``.

    User and password are URL-decoded (write ``@`` as ``%40``). Raises
    :class:`SettingError` naming ``PODCODE_SMTP_URL``, without the password.
    """

    def bad(reason: str) -> SettingError:
        return SettingError("smtp_url", _redact(url), reason)

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise bad(f"not a URL ({exc})") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise bad("expected smtp://user:pass@host:port or smtps://...")
    if not parts.hostname:
        raise bad("no host name")
    options = _options(parts.query, bad)
    starttls = options.get("starttls", False)
    if parts.scheme == "smtps" and starttls:
        raise bad("smtps:// is TLS already; use starttls=true with smtp:// only")
    default_port = STARTTLS_PORT if starttls else DEFAULT_PORTS[parts.scheme]
    return SmtpConfig(
        host=parts.hostname,
        port=port or default_port,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        ssl=parts.scheme == "smtps",
        starttls=bool(starttls),
        timeout_seconds=float(options.get("timeout", 30.0)),
    )


def _options(query: str, bad: Callable[[str], SettingError]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "starttls" and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            options["starttls"] = value.lower() in ("true", "1", "yes")
        elif key == "timeout" and value.replace(".", "", 1).isdigit() and float(value) > 0:
            options["timeout"] = float(value)
        else:
            raise bad(
                f"unknown or bad option {key}={value!r}; "
                "known: starttls=true|false, timeout=SECONDS"
            )
    return options


@dataclass
class EmailNotifier:
    """Sends the owner's emails through one SMTP server, retrying with backoff."""

    config: SmtpConfig
    sender: str
    owner: str
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    attempts: int = 5
    """Tries per mail; waits first_delay_seconds, then twice as long each time."""
    first_delay_seconds: float = 2.0
    ssl_context: ssl.SSLContext | None = None
    """Trusted CAs for smtps/STARTTLS; default: the system's."""

    async def send_warning(self, mail: WarningMail) -> bool:
        return await self.send(render_warning(mail))

    async def send_final(self, mail: FinalMail) -> bool:
        return await self.send(render_final(mail))

    async def send(self, rendered: Rendered) -> bool:
        try:
            message = self.message(rendered)
        except Exception:
            logger.exception("cannot build the email %r", rendered.subject)
            return False
        delay = self.first_delay_seconds
        for attempt in range(1, self.attempts + 1):
            try:
                await in_thread(self.deliver, message)
            except (OSError, smtplib.SMTPException) as exc:
                logger.warning(
                    "sending %r to %s through %s failed (attempt %d of %d): %s",
                    rendered.subject, self.owner, self.config.safe_url, attempt, self.attempts,
                    _describe(exc),
                )
                if attempt < self.attempts:
                    await self.sleep(delay)
                    delay *= 2
                continue
            logger.info("sent %r to %s", rendered.subject, self.owner)
            return True
        logger.error(
            "gave up sending %r to %s after %d attempts",
            rendered.subject, self.owner, self.attempts,
        )
        return False

    def message(self, rendered: Rendered) -> EmailMessage:
        message = EmailMessage()
        message["Subject"] = rendered.subject
        message["From"] = self.sender
        message["To"] = self.owner
        message["Date"] = formatdate(localtime=False, usegmt=True)
        message["Message-ID"] = make_msgid(domain=self.sender.rpartition("@")[2] or None)
        message.set_content(rendered.text)
        message.add_alternative(rendered.html, subtype="html")
        for filename, content in rendered.attachments:
            message.add_attachment(
                content, maintype="text", subtype="x-diff", filename=filename
            )
        return message

    def tls_context(self) -> ssl.SSLContext:
        """The given context, else the system's CAs (loaded once: it takes a while)."""
        if self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        return self.ssl_context

    def deliver(self, message: EmailMessage) -> None:
        """One blocking attempt: connect, TLS, log in, send."""
        config = self.config
        timeout = config.timeout_seconds
        smtp: smtplib.SMTP
        if config.ssl:
            smtp = smtplib.SMTP_SSL(
                config.host, config.port, timeout=timeout, context=self.tls_context()
            )
        else:
            smtp = smtplib.SMTP(config.host, config.port, timeout=timeout)
        with smtp:
            if config.starttls:
                smtp.starttls(context=self.tls_context())
            if config.username:
                smtp.login(config.username, config.password or "")
            smtp.send_message(message)


async def in_thread(call: Callable[[EmailMessage], None], message: EmailMessage) -> None:
    """Run ``call(message)`` on a daemon thread named ``podcode-mail``.

    The name keeps it out of the CPU activity of the user's work, the debugger leaves
    it alone (a service thread), and a daemon thread never holds up the end of the
    process while a server times out.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(None)

    def work() -> None:
        outcome: BaseException | None = None
        try:
            call(message)
        except BaseException as exc:
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop is already closed: nobody waits
            loop.call_soon_threadsafe(settle, outcome)

    thread = threading.Thread(target=work, name="podcode-mail", daemon=True)
    mark_service_thread(thread)
    thread.start()
    await done


def _describe(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return f"the server refused the user name or password ({exc.smtp_code})"
    return f"{type(exc).__name__}: {exc}"


def resolve_owner(
    owner: str | None, environ: Environ, owner_annotation: Callable[[], str | None] | None = None
) -> str | None:
    """``owner=`` (settings), else ``PODCODE_OWNER``, else the annotation ``podcode.io/owner``."""
    found = owner or environ.get(OWNER_ENV) or None
    if found is None and owner_annotation is not None:
        try:
            found = owner_annotation()
        except Exception:
            logger.exception("cannot read the pod annotation podcode.io/owner")
    return found.strip() if found and found.strip() else None


def build_notifier(
    owner: str | None,
    state: SessionState,
    *,
    environ: Environ,
    owner_annotation: Callable[[], str | None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> EmailNotifier | None:
    """The owner's notifier, or None (said once in the log and in the session's notes)."""
    found = resolve_owner(owner, environ, owner_annotation)
    if found is not None:
        state.set(owner=found)
    url = (environ.get(SMTP_URL_ENV) or "").strip()
    if found is None:
        _say(state, "No owner to email: set owner= on @vscode, PODCODE_OWNER, or the pod "
                    "annotation podcode.io/owner. The session is still cleaned up when idle.")
        return None
    if not url:
        _say(state, f"No {SMTP_URL_ENV}: {found} will not be emailed before or after cleanup. "
                    "Set it to smtp://user:pass@host:port (or smtps://...).")
        return None
    try:
        config = parse_smtp_url(url)
    except SettingError as exc:
        _say(state, f"{exc}. No email will be sent.")
        return None
    sender = (environ.get(MAIL_FROM_ENV) or "").strip() or f"podcode@{socket.gethostname()}"
    return EmailNotifier(config=config, sender=sender, owner=found, sleep=sleep)


def _say(state: SessionState, text: str) -> None:
    state.note(text)
    if text not in _SAID:
        _SAID.add(text)
        logger.warning("%s", text)
