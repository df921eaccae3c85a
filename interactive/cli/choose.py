"""Which session a verb talks to when a home (or a pod) holds several: ``--task``, ``--pid``
and ``--session``."""

from __future__ import annotations

from collections.abc import Sequence

from interactive.base.record import SessionRecord
from interactive.base.sessionfile import Found, parse_session
from interactive.cli.errors import CliError, Exit


class SessionGone(CliError):
    """The chosen session's process is gone: shown, never reached, its secrets unused."""

    def __init__(self, found: Found, label: str) -> None:
        super().__init__(
            f"the {label} of {found.task or 'an unknown task'} has ended without closing: its "
            f"process {found.pid} is gone (killed? out of memory?); its IDE and debugger were "
            "stopped and its secrets cleared",
            Exit.NOT_FOUND,
        )
        self.found = found
        self.label = label


def selector(task: str | None, pid: int | None, session: str | None = None) -> str:
    parts = ([f"task {task}"] if task else []) + ([f"pid {pid}"] if pid else [])
    return " and ".join(parts + ([f"id {session}"] if session else []))


def choose(found: Sequence[Found], task: str | None, pid: int | None, where: str,
           session: str | None = None) -> Found:
    """The one open session that matches; else, when none is open, the newest match (ended
    or gone, for the caller to report). A usage error when several open ones match."""
    matching = [f for f in found if f.matches(task, pid, session)]
    if not matching:
        there = "; ".join(f.describe() for f in found) or "none"
        raise CliError(f"no session of {selector(task, pid, session)} in {where} (sessions "
                       f"there: {there})", Exit.NOT_FOUND)
    open_ = [f for f in matching if f.open]
    if len(open_) > 1:
        listed = "; ".join(f.describe() for f in sorted(open_, key=lambda f: f.started))
        raise CliError(f"{len(open_)} sessions wait in {where}: choose one with --task TASK, "
                       f"--pid PID or --session ID ({listed})", Exit.USAGE)
    return open_[0] if open_ else max(matching, key=lambda f: f.started)


def label(base: str, found: Sequence[Found], chosen: Found) -> str:
    """``base`` ("local session", "pod ns/name"), naming the process when there are several."""
    return base if len(found) <= 1 else f"{base} (pid {chosen.pid})"


def usable(chosen: Found, name: str) -> SessionRecord:
    """The chosen session's record, checked: an ended or gone session is an error."""
    if chosen.ended:
        raise CliError(f"the {name} has ended (state {chosen.state}; {chosen.where})",
                       Exit.NOT_FOUND)
    if chosen.gone:
        raise SessionGone(chosen, name)
    return parse_session(dict(chosen.data), chosen.where)
