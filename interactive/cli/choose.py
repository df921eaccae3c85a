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
    lead = ranks_leader(open_)
    if lead is not None:
        return lead
    if len(open_) > 1:
        listed = "; ".join(f.describe() for f in sorted(open_, key=lambda f: f.started))
        raise CliError(f"{len(open_)} sessions wait in {where}: {how_to_choose(open_)} "
                       f"({listed})", Exit.USAGE)
    return open_[0] if open_ else max(matching, key=lambda f: f.started)


def ranks_leader(open_: Sequence[Found]) -> Found | None:
    """Where the open sessions are the ranks of one distributed task (a resume or an abort
    on one reaches them all), the one that leads them; None otherwise."""
    if len(open_) < 2 or len({f.task for f in open_}) != 1:
        return None
    if any(f.record.rank is None for f in open_):
        return None
    leaders = [f for f in open_ if f.record.leader]
    return leaders[0] if len(leaders) == 1 else None


def _apart(values: Sequence[object]) -> bool:
    return len(set(values)) == len(values)


def how_to_choose(open_: Sequence[Found]) -> str:
    """How to pick one of ``open_``: only the flags whose values tell them all apart (two
    sessions of one task in one process: ``--session``, with their ids)."""
    flags = [flag for flag, values in (("--task TASK", [f.task for f in open_]),
                                       ("--pid PID", [f.pid for f in open_])) if _apart(values)]
    ids = [f.record.session for f in open_]
    if all(ids) and _apart(ids):
        if not flags:
            return f"choose one with --session ID (their ids: {', '.join(map(str, ids))})"
        flags.append("--session ID")
    if flags:
        return "choose one with " + " or ".join(flags)
    if _apart([(f.task, f.pid) for f in open_]):
        return "choose one with --task TASK and --pid PID together"
    return ("nothing tells them apart (records of an older podcode): end the ones you do "
            "not need")


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
