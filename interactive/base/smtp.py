"""``PODCODE_SMTP_URL``: where and how podcode sends mail, parsed once.

``smtp://user:pass@host:port``, ``smtps://...`` for TLS from the start,
``?starttls=true`` to upgrade a plain connection, ``?timeout=SECONDS`` per attempt.
``PODCODE_SMTP_PASSWORD_FILE`` names a file (a mounted Kubernetes Secret) holding the
password, so that it need not be in any environment. Shared by the mailer (pod) and
``podcode doctor``; the password never reaches a message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from interactive.base.errors import SettingError

DEFAULT_PORTS = {"smtp": 25, "smtps": 465}
STARTTLS_PORT = 587


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


PASSWORD_FILE_ENV = "PODCODE_SMTP_PASSWORD_FILE"  # noqa: S105 - a variable name
MAX_PASSWORD_BYTES = 4096


def smtp_config(url: str, environ: Mapping[str, str]) -> SmtpConfig:
    """:func:`parse_smtp_url`, with the password from ``PODCODE_SMTP_PASSWORD_FILE`` when
    that is set (it wins over one in the URL)."""
    config = parse_smtp_url(url)
    path = (environ.get(PASSWORD_FILE_ENV) or "").strip()
    if not path:
        return config
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_PASSWORD_BYTES + 1)
    except OSError as exc:
        raise SettingError("smtp_password_file", path, f"cannot read it ({exc.strerror})") from None
    if len(raw) > MAX_PASSWORD_BYTES:
        raise SettingError("smtp_password_file", path, "too large to be a password")
    return replace(config, password=raw.decode("utf-8").rstrip("\r\n"))
