"""Keeping a session's secrets out of everything the MCP server says: the one scrubber
(:class:`interactive.base.secrets.Secrets`) applied to every tool result, error, resource,
prompt and log line.

A session's bearer token (and the IDE's password, when a record holds one) reach this
process from the session's record; an agent must never read them back, whether from an
error message that quotes a URL, or from a cell that prints the task's environment. What
is removed is the secret as written: code that transforms it (reverses, encodes it) can
still show it, as it can show anything the task's code can read (docs/agent.md).
"""

from __future__ import annotations

import logging

from interactive.base.secrets import HIDDEN, Secrets

__all__ = ["HIDDEN", "ScrubbingFilter", "Secrets", "guard_logging"]

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
