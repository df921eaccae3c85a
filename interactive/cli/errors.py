"""Exit codes a script can rely on, and the one-line errors behind them."""

from __future__ import annotations

from enum import IntEnum

from interactive.base.errors import PodcodeError, SettingError
from interactive.base.sessionfile import SessionFileError
from interactive.kube.cluster import ClusterError
from interactive.kube.portforward import ForwardError


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
    """The session's control API refused or did not answer. ``kind``: unreachable,
    unauthorized, conflict, bad_request, failed."""

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


_CLUSTER = {
    "config": Exit.UNREACHABLE, "unreachable": Exit.UNREACHABLE, "forbidden": Exit.FORBIDDEN,
    "not_found": Exit.NOT_FOUND, "not_session": Exit.NOT_FOUND, "ended": Exit.NOT_FOUND,
}
_CONTROL = {
    "unreachable": Exit.UNREACHABLE, "unauthorized": Exit.FORBIDDEN, "conflict": Exit.CONFLICT,
    "bad_request": Exit.USAGE,
}


def exit_code(error: PodcodeError) -> Exit:
    """The exit code for an error the CLI reports in one line."""
    if isinstance(error, CliError):
        return error.code
    if isinstance(error, ClusterError):
        return _CLUSTER.get(error.kind, Exit.FAILED)
    if isinstance(error, ControlError):
        return _CONTROL.get(error.kind, Exit.FAILED)
    if isinstance(error, SessionFileError):
        return Exit.NOT_FOUND if error.kind == "missing" else Exit.FAILED
    if isinstance(error, ForwardError):
        return Exit.FORBIDDEN if error.status in (401, 403) else Exit.UNREACHABLE
    if isinstance(error, SettingError):
        return Exit.USAGE
    return Exit.FAILED
