"""The environment podcode's own processes get: the task's, without podcode's secrets.

The task's process was started with its environment, and nothing can take a variable
out of that process's ``/proc/<pid>/environ`` afterwards. What podcode starts (the
watchdog, code-server and so every terminal and debug adapter of the IDE, the SSH
shells and commands, code-server's extension installs) gets :func:`without_secrets`
instead, so that whoever can read those processes (the same user: anyone logged in to
the session) does not find them there.
"""

from __future__ import annotations

from collections.abc import Mapping

SECRET_VARIABLES = ("PASSWORD", "HASHED_PASSWORD", "PODCODE_SMTP_URL")
"""Never in a process podcode starts: code-server's own login, and the SMTP URL, which
may hold a password (only the task's process sends mail)."""


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without :data:`SECRET_VARIABLES`."""
    return {name: value for name, value in environ.items() if name not in SECRET_VARIABLES}
