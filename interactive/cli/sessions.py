"""``podcode list``: the sessions in the cluster."""

from __future__ import annotations

import argparse
from typing import Any

from interactive.cli.console import Console
from interactive.cli.errors import Exit
from interactive.cli.output import iso, since, table, until
from interactive.cli.target import connect
from interactive.cluster import SessionInfo

HEADERS = ("POD", "NAMESPACE", "STATE", "TASK", "OWNER", "IDLE", "CLEANUP")


def row(info: SessionInfo, now: float) -> tuple[str, ...]:
    return (
        info.pod, info.namespace, info.state or "-", info.task or "-", info.owner or "-",
        since(info.idle_since, now), until(info.reap_at, now),
    )


def as_json(info: SessionInfo, now: float) -> dict[str, Any]:
    return {
        "pod": info.pod, "namespace": info.namespace, "state": info.state, "task": info.task,
        "owner": info.owner, "phase": info.phase,
        "idle_since": iso(info.idle_since),
        "idle_seconds": None if info.idle_since is None else round(now - info.idle_since),
        "reap_at": iso(info.reap_at), "ports": dict(info.ports),
    }


def run(args: argparse.Namespace, console: Console) -> int:
    with connect(args, console) as cluster:
        namespace = None if args.all_namespaces else (args.namespace or cluster.namespace)
        sessions = sorted(cluster.list_sessions(namespace), key=lambda s: (s.namespace, s.pod))
    now = console.clock()
    if args.output == "json":
        console.json([as_json(s, now) for s in sessions])
    elif not sessions:
        where = f"namespace {namespace}" if namespace else "any namespace"
        console.warn(f"no podcode sessions in {where}")
    else:
        console.say(table(HEADERS, [row(s, now) for s in sessions]))
    return Exit.OK
