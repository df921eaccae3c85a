"""Whether podcode runs in a process, read from its environment, and what to say about
a ``PODCODE_*`` variable it refuses.

A debugging aid never stops a task: a bad variable (``PODCODE_MAX_IDLE_SECONDS=abc``, a
hook ``PODCODE_ON_REAP=nomod:fn`` that cannot be imported, ``PODCODE_ENABLE=maybe``)
never raises. With podcode off it is one warning line; with podcode on, one error
line, and podcode stays off in that process, so the task runs as if undecorated. A bad
argument written in ``@vscode(...)`` is a mistake in the code and still raises where it
is written (:func:`interactive.base.settings.read_settings`).

Pure: the decorator passes the environment and logs the lines.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from interactive.base.errors import SettingError
from interactive.base.settings import env_name, is_enabled, read_settings
from interactive.base.smtp import parse_smtp_url
from interactive.base.types import Environ

ENABLE_ENV = "PODCODE_ENABLE"
SMTP_URL_ENV = "PODCODE_SMTP_URL"
"""Not a setting of the decorator (it holds a password, read when a mail is sent), but
checked with them: a mistyped mail server is found at the first call, not at the
warning that it would have sent."""
SHOWN_CHARS = 120
"""A longer value is cut in the line (public keys, lists of extensions)."""
_PASSWORD = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^/?#@\s:]*:)(?P<secret>\S*)@")
"""``scheme://user:password@`` in a value: the password, up to the last ``@``."""


@dataclass(frozen=True)
class Activation:
    """podcode's answer for one process, from its environment."""

    wanted: bool
    """``PODCODE_ENABLE``, else running inside Kubernetes, asks for podcode."""
    refused: tuple[SettingError, ...] = ()
    """The variables whose value is refused (``PODCODE_ENABLE``'s own included)."""

    @property
    def enabled(self) -> bool:
        """podcode runs: asked for, and no variable refused."""
        return self.wanted and not self.refused

    @property
    def level(self) -> int:
        """An error when a refused variable keeps podcode off, a warning when it was off
        anyway."""
        return logging.ERROR if self.wanted else logging.WARNING

    def lines(self) -> list[tuple[str, str]]:
        """``(variable, line)`` for each refused variable: the line names the variable,
        its value (never a password) and what it accepts."""
        return [(env_name(problem.name), refusal_line(problem, self.wanted))
                for problem in self.refused]


def activation(environ: Environ, refused: Sequence[SettingError] | None = None) -> Activation:
    """Whether podcode runs with ``environ``. ``refused``: the settings' variables the
    caller already checked (:func:`read_settings` at decoration), else checked here."""
    problems: list[SettingError] = []
    try:
        wanted = is_enabled(environ)
    except SettingError as exc:
        problems.append(exc)
        wanted = is_enabled({**environ, ENABLE_ENV: ""})  # as if it were not set
    problems.extend(read_settings({}, environ)[1] if refused is None else refused)
    problems.extend(_smtp_refused(environ))
    return Activation(wanted, tuple(problems))


def _smtp_refused(environ: Environ) -> list[SettingError]:
    url = (environ.get(SMTP_URL_ENV) or "").strip()
    if not url:
        return []
    try:
        parse_smtp_url(url)
    except SettingError as exc:
        return [exc]
    return []


def refusal_line(problem: SettingError, wanted: bool) -> str:
    """The one line about a refused variable, podcode on (``wanted``) or off."""
    variable = f"{env_name(problem.name)}={shown_value(problem.value)}"
    reason = _scrubbed(problem.reason, problem.value)
    if wanted:
        return (f"{variable}: {reason}; podcode is off in this process, so the task runs "
                "without a debug session until the variable is fixed")
    return f"{variable} is ignored: {reason} (podcode is off)"


def shown_value(value: object) -> str:
    """``value`` as the line shows it: quoted, a URL's password as ``***``, cut short."""
    text = _PASSWORD.sub(r"\g<head>***@", str(value))
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 3] + "..."
    return repr(text)


def _scrubbed(reason: str, value: object) -> str:
    """``reason`` without any piece of a password found in ``value`` (a parser's message
    may quote part of the URL)."""
    for match in _PASSWORD.finditer(str(value)):
        secret = match.group("secret")
        for piece in sorted({secret, *re.split(r"[/?#:]", secret)}, key=len, reverse=True):
            if piece and piece != "***":
                reason = reason.replace(piece, "***")
    return reason
