"""The ranks of a distributed job as an agent needs them, from one rank's ``GET
/api/status`` (its own ``rank`` and ``error``, the pod's other ranks under ``ranks``): which
rank failed on its own (the bug to read and fix) and which only stopped because of it.

A rank stopped by another's failure says so in its error
(:func:`interactive.distributed.blame.reason`): ``stopped because rank N[ on pod P]
failed (...)``, or ``stopped because a rank ... broke the process group`` when the culprit
is not known. Its session waits all the same; one resume on any rank of the pod reaches
every rank that waits there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

STOPPED = re.compile(r"stopped because (?:rank (\d+)(?: on pod (\S+))? failed"
                     r"|a rank .*? broke the process group)")
WAITING = ("waiting", "warned")
"""The states of a rank whose failure is open now (a rank that resumed or ended keeps its
last error in its record: it is no failure any more)."""


def everyone(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """This rank and the pod's other ranks, each ``{rank, local_rank, state, error, debug,
    this}``; empty for a session that is no rank of a distributed job."""
    rank, peers = status.get("rank"), status.get("ranks")
    if not isinstance(rank, Mapping) or not isinstance(peers, list):
        return []
    own = {"rank": rank.get("rank"), "local_rank": rank.get("local_rank"),
           "state": status.get("state"), "error": status.get("error"), "this": True}
    return [own, *({**p, "this": False} for p in peers if isinstance(p, Mapping))]


def debug_port(one: Mapping[str, Any]) -> int | None:
    debug = one.get("debug")
    port = debug.get("port") if isinstance(debug, Mapping) else None
    return port if isinstance(port, int) else None


def blame(status: Mapping[str, Any],
          sessions: Mapping[int, str] | None = None) -> dict[str, Any]:
    """``failed_ranks`` (the ranks whose own code failed, and any other pod's rank that
    the stopped ones name) and ``stopped_ranks`` (the ranks that only stopped because of
    another rank's failure, with ``because_rank``); ``sessions``: the session id of a rank
    by its debugger's port, where this server knows it. Empty for a single process."""
    failed: list[dict[str, Any]] = []
    stopped: list[dict[str, Any]] = []
    named: dict[int, str | None] = {}
    for one in everyone(status):
        error = one.get("error")
        if not isinstance(error, str) or not error or one.get("state") not in WAITING:
            continue
        entry: dict[str, Any] = {"rank": one.get("rank"), "local_rank": one.get("local_rank")}
        port = debug_port(one)
        if one["this"]:
            entry["this_session"] = True
        elif sessions is not None and port is not None and port in sessions:
            entry["session"] = sessions[port]
        match = STOPPED.search(error)
        if match is None:
            failed.append({**entry, "error": error})
            continue
        if match.group(1) is not None:
            entry["because_rank"] = int(match.group(1))
            named[int(match.group(1))] = match.group(2)
        stopped.append(entry)
    here = {f.get("rank") for f in failed}
    failed += [{"rank": rank, "pod": pod} for rank, pod in sorted(named.items())
               if rank not in here and pod is not None]  # one of this pod's: it resumed
    answer: dict[str, Any] = {}
    if failed:
        answer["failed_ranks"] = failed
    if stopped:
        answer["stopped_ranks"] = stopped
    return answer


def pointer(status: Mapping[str, Any], sessions: Mapping[int, str] | None = None) -> str | None:
    """For a rank that only stopped because another failed: where to read the bug."""
    told = blame(status, sessions)
    if not any(s.get("this_session") for s in told.get("stopped_ranks", [])):
        return None
    culprits = [f for f in told.get("failed_ranks", []) if not f.get("this_session")]
    if not culprits:
        return None
    first = culprits[0]
    where = (f"its session is {first['session']}" if "session" in first
             else f"on pod {first['pod']}" if first.get("pod")
             else "list_sessions finds its session")
    return (f"this rank only stopped because rank {first['rank']} failed ({where}): "
            "describe_failure and evaluate there; one resume on any rank of the pod "
            "re-runs every rank")
