"""Keeping a session's secrets out of everything the MCP server says: one function,
:meth:`Secrets.scrub`, applied to every tool result, error, resource, prompt and log line.

A session's bearer token (and the IDE's password, when a record holds one) reach this
process from the session's record; an agent must never read them back, whether from an
error message that quotes a URL, or from a cell that prints the task's environment. What
is removed is the secret as written: code that transforms it (reverses, encodes it) can
still show it, as it can show anything the task's code can read (docs/agent.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

HIDDEN = "[secret removed]"
"""What stands where a secret was."""
MIN_SECRET_CHARS = 6
"""Shorter values are not treated as secrets: removing them would garble ordinary text
(a test's ``"x"``), and no session writes secrets that short."""


class Secrets:
    """The secrets this server knows, growing as it reaches sessions; thread-safe."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._values: tuple[str, ...] = ()
        self.add(*values)

    def add(self, *values: str | None) -> None:
        """Remember ``values`` (None, empty or short ones are ignored)."""
        with self._lock:
            known = set(self._values)
            known.update(v for v in values if v and len(v) >= MIN_SECRET_CHARS)
            # Longest first: a secret that contains another is removed whole.
            self._values = tuple(sorted(known, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        """``text`` with every known secret replaced by :data:`HIDDEN`."""
        for value in self._values:
            if value in text:
                text = text.replace(value, HIDDEN)
        return text

    def scrub_data(self, data: Any) -> Any:
        """``data`` (JSON-like: dicts, lists, strings, numbers) with every string, key
        included, scrubbed; other values are returned as they are."""
        if isinstance(data, str):
            return self.scrub(data)
        if isinstance(data, dict):
            return {self.scrub_data(k): self.scrub_data(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.scrub_data(item) for item in data]
        return data


class ScrubbingFilter(logging.Filter):
    """A handler filter that scrubs each record's message and traceback before it is
    written (the message is formatted here, once, and its arguments dropped)."""

    def __init__(self, secrets: Secrets) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.secrets.scrub(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.secrets.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self.secrets.scrub(record.stack_info)
        return True


def guard_logging(secrets: Secrets, root: logging.Logger | None = None) -> None:
    """Scrub every line written through ``root``'s handlers (the root logger by default),
    with a stderr handler added when it has none (stdout carries the protocol)."""
    root = root or logging.getLogger()
    if not root.handlers:
        added = logging.StreamHandler()
        added.setFormatter(logging.Formatter("podcode: %(message)s"))
        root.addHandler(added)
    for handler in root.handlers:
        if not any(isinstance(f, ScrubbingFilter) for f in handler.filters):
            handler.addFilter(ScrubbingFilter(secrets))
