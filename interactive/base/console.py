"""podcode's log lines on the task's output, each starting with ``podcode:``.

A task's process seldom configures logging, and Python then prints warnings and errors
bare (its "last resort" handler): a line of podcode's could not be told from the task's
own. :func:`install` gives podcode's loggers a handler that does what the last resort
does (WARNING and above, to stderr), with ``podcode:`` before every line, and only while
no other handler would take the record: once the task configures logging
(``logging.basicConfig``, a framework's set-up) its handlers format podcode's records
like any other, and nothing is printed twice. The CLI configures its own handlers and
never calls this.
"""

from __future__ import annotations

import logging
import sys

PREFIX = "podcode:"
LOGGERS = ("interactive", "server_bootstrap", "vscode_config")
"""podcode's packages: their loggers' records go through the handler."""


def prefixed(text: str) -> str:
    """``text`` with ``podcode:`` before each of its lines (a traceback's too), unless a
    line starts with it already."""
    return "\n".join(
        line if line.startswith(PREFIX) else f"{PREFIX} {line}" for line in text.split("\n")
    )


def others_take(logger: logging.Logger, handler: logging.Handler) -> bool:
    """Whether a record of ``logger`` reaches a handler other than ``handler`` (the way
    :meth:`logging.Logger.callHandlers` walks up, propagation included)."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(other is not handler for other in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


class LastResort(logging.Handler):
    """Python's last resort for podcode's loggers, with the ``podcode:`` prefix."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if others_take(logging.getLogger(record.name), self):
            return
        try:
            stream = sys.stderr  # looked up each time, as the last resort does
            stream.write(prefixed(self.format(record)) + "\n")
            stream.flush()
        except Exception:  # a closed stream: logging's own way of saying so
            self.handleError(record)


def install() -> None:
    """Put :class:`LastResort` on podcode's loggers, once per process (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(handler, LastResort) for handler in logger.handlers):
            logger.addHandler(LastResort())
