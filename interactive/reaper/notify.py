"""Email to the session's owner over SMTP: the idle warning and the cleanup report.

Configured by ``PODCODE_SMTP_URL`` (``smtp://user:pass@host:port``,
``smtps://...`` for TLS from the start, ``?starttls=true`` to upgrade a plain
connection) and ``PODCODE_MAIL_FROM``. A server that is down is retried with
exponential backoff; a mail that still cannot be sent is logged (never with
the password) and sending returns False: it never raises to the caller.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Protocol

from interactive.base import threads
from interactive.base.errors import SettingError
from interactive.base.smtp import SmtpConfig, smtp_config
from interactive.base.state import SessionState
from interactive.base.types import Environ
from vscode_config.mail import FinalMail, Rendered, WarningMail, render_final, render_warning

logger = logging.getLogger(__name__)

SMTP_URL_ENV = "PODCODE_SMTP_URL"
MAIL_FROM_ENV = "PODCODE_MAIL_FROM"
OWNER_ENV = "PODCODE_OWNER"
_SAID: set[str] = set()
"""Configuration problems already logged by this process (each is said once)."""


class Notifier(Protocol):
    """Sends the owner's emails; returns whether the mail went out, never raises."""

    async def send_warning(self, mail: WarningMail) -> bool: ...

    async def send_final(self, mail: FinalMail) -> bool: ...


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
    """Run ``call(message)`` on a podcode service thread (``podcode-mail``): its CPU is not
    the user's activity, the debugger leaves it alone, and a server that times out never
    holds up the end of the process."""
    await threads.in_thread(lambda: call(message), "mail")


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
        config = smtp_config(url, environ)
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


EXIT_WAIT_SECONDS = 10.0
"""How long a process that is exiting waits for mail still being sent (then gives up)."""
_pending: set[threading.Thread] = set()
_pending_lock = threading.Lock()


def send_in_background(
    send: Callable[[Rendered], Coroutine[Any, Any, bool]], rendered: Rendered
) -> threading.Thread:
    """Send ``rendered`` on a thread of its own: the caller (a task that just succeeded)
    goes on at once, however slow or unreachable the mail server. A process that exits
    meanwhile waits at most :data:`EXIT_WAIT_SECONDS` for it, then gives up with one line."""

    def deliver() -> None:
        try:
            asyncio.run(send(rendered))  # retries and logs by itself
        except Exception:
            logger.exception("the email %r was not sent", rendered.subject)
        finally:
            with _pending_lock:
                _pending.discard(threading.current_thread())

    thread = threads.start_thread(deliver, "mail")
    with _pending_lock:
        if not _pending:
            atexit.register(_wait_for_mail)
        _pending.add(thread)
    return thread


def _wait_for_mail(timeout: float = EXIT_WAIT_SECONDS) -> None:
    with _pending_lock:
        waiting = list(_pending)
    deadline = time.monotonic() + timeout
    for thread in waiting:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(thread.is_alive() for thread in waiting):
        logger.warning("exiting while an email is still being sent: it is abandoned")
