"""The exit codes a script can rely on (docs/cli.md lists them); which error means which
is :data:`interactive.cli.errors.EXIT_CODES`."""

from __future__ import annotations

from enum import IntEnum


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
