"""Which processes carry a session's marker: the tests' and benchmarks' own look, kept
apart from the watchdog's code it checks."""

from __future__ import annotations

import psutil

from interactive.base.identity import SESSION_VARIABLE


def marked_processes(session: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose environment carries ``PODCODE_SESSION_ID=session``:
    code-server's tree, its terminals, debug adapters."""
    found = []
    for proc in psutil.process_iter():
        try:
            if (proc.environ().get(SESSION_VARIABLE) == session
                    and proc.status() != psutil.STATUS_ZOMBIE):
                found.append(proc)
        except psutil.Error:
            continue
    return found
