"""Exit codes a script can rely on, and the one-line errors behind them.

Every error the CLI reports in one line has a class that says what went wrong;
:data:`EXIT_CODES` maps the classes to exit codes, in one place (the most derived class
listed wins).
"""

from __future__ import annotations

from enum import IntEnum

from interactive.base.errors import PodcodeError, SettingError
from interactive.base.sessionfile import NoSession
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


class Exit(IntEnum):
    OK = 0
    FAILED = 1
    """The command ran and something did not work (a doctor check, a refused request)."""
    USAGE = 2
    """Bad arguments."""
    NOT_FOUND = 3
    """No such pod, not a podcode session, the session ended, no local session."""
    UNREACHABLE = 4
    """No kubeconfig, the API server or the session's control API does not answer."""
    FORBIDDEN = 5
    """Kubernetes (403/401) or the session (401) refused."""
    CONFLICT = 6
    """The session cannot do that now (resume while the task runs)."""
    INTERRUPTED = 130


class CliError(PodcodeError):
    """A user-facing failure: one line of text and an exit code."""

    def __init__(self, message: str, code: Exit = Exit.FAILED) -> None:
        super().__init__(message)
        self.code = code


class ControlError(PodcodeError):
    """The session's control API failed; ``status`` is its HTTP status, if it answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ControlUnreachable(ControlError):
    """The session's control API does not answer."""


class ControlUnauthorized(ControlError):
    """The session refused the token (401)."""


class ControlConflict(ControlError):
    """The session cannot do that now (409: resume while the task runs)."""


class ControlBadRequest(ControlError):
    """The session rejected the request (400)."""


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
