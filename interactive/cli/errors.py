"""The one-line errors of the CLI, and the exit code (:class:`~interactive.cli.exits.Exit`)
each means.

Every error the CLI reports in one line has a class that says what went wrong;
:data:`EXIT_CODES` maps the classes to exit codes, in one place (the most derived class
listed wins).
"""

from __future__ import annotations

from interactive.base.control_client import (
    ControlBadRequest,
    ControlConflict,
    ControlError,
    ControlRefused,
    ControlUnauthorized,
    ControlUnreachable,
)
from interactive.base.errors import PodcodeError, SettingError
from interactive.base.sessionfile import NoSession
from interactive.cli.exits import Exit
from interactive.kube.errors import (
    BadRequest,
    Forbidden,
    KubeConfigError,
    NotASession,
    NotFound,
    SessionEnded,
    Transient,
    Unauthorized,
)

__all__ = [
    "EXIT_CODES", "CliError", "ControlBadRequest", "ControlConflict", "ControlError",
    "ControlRefused", "ControlUnauthorized", "ControlUnreachable", "Exit", "exit_code",
]


class CliError(PodcodeError):
    """A user-facing failure: one line of text and an exit code."""

    def __init__(self, message: str, code: Exit = Exit.FAILED) -> None:
        super().__init__(message)
        self.code = code


EXIT_CODES: dict[type[PodcodeError], Exit] = {
    SettingError: Exit.USAGE,
    ControlBadRequest: Exit.USAGE,
    NotFound: Exit.NOT_FOUND,
    NotASession: Exit.NOT_FOUND,
    SessionEnded: Exit.NOT_FOUND,
    NoSession: Exit.NOT_FOUND,
    KubeConfigError: Exit.UNREACHABLE,
    Transient: Exit.UNREACHABLE,
    ControlUnreachable: Exit.UNREACHABLE,
    Unauthorized: Exit.FORBIDDEN,
    Forbidden: Exit.FORBIDDEN,
    ControlUnauthorized: Exit.FORBIDDEN,
    ControlConflict: Exit.CONFLICT,
    BadRequest: Exit.FAILED,
}
"""An error's class to its exit code; a class not listed (nor any of its bases): FAILED."""


def exit_code(error: PodcodeError) -> Exit:
    """The exit code for an error the CLI reports in one line."""
    if isinstance(error, CliError):
        return error.code
    for cls in type(error).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return Exit.FAILED
