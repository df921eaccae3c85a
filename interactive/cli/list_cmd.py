"""``podcode list``: the sessions in the cluster; ``--local``: those on this machine."""

from __future__ import annotations

import argparse
from typing import Any

from interactive.base.record import GONE
from interactive.base.sessionfile import Found, find_local
from interactive.base.settings import podcode_home
from interactive.cli.errors import Exit
from interactive.cli.output import iso, since, table, until
from interactive.cli.target import connect
from interactive.cli.terminal import Console
from interactive.kube.cluster import SessionInfo
from interactive.kube.errors import KubeConfigError

HEADERS = ("POD", "NAMESPACE", "STATE", "TASK", "OWNER", "IDLE", "CLEANUP")
LOCAL_HEADERS = ("PID", "SESSION", "TASK", "STATE", "STARTED", "ERROR")
"""SESSION tells apart two sessions of one task in one process (``--session ID``)."""


def row(info: SessionInfo, now: float, ray: bool = False) -> tuple[str, ...]:
    """A table row; ``ray``: with the RAY column (some listed pod is a KubeRay pod)."""
    task = info.task or "-"
    if len(info.sessions) > 1:  # several sessions in the pod: attach asks which
        task += f" (+{len(info.sessions) - 1} more)"
    idle_since, reap_at = info.cleanup()
    cells = (
        info.pod, info.namespace, info.state or "-", task, info.owner or "-",
        since(idle_since, now), until(reap_at, now),
    )
    return (*cells, info.ray or "-") if ray else cells


def as_json(info: SessionInfo, now: float) -> dict[str, Any]:
    idle_since, reap_at = info.cleanup()
    return {
        "pod": info.pod, "namespace": info.namespace, "state": info.state, "task": info.task,
        "owner": info.owner, "phase": info.phase,
        "idle_since": iso(idle_since),
        "idle_seconds": None if idle_since is None else round(now - idle_since),
        "reap_at": iso(reap_at), "ports": dict(info.ports), "ray": info.ray,
        "sessions": {name: dict(data) for name, data in info.sessions.items()},
    }


def local_row(found: Found, now: float) -> tuple[str, ...]:
    started = f"{since(found.started, now)} ago" if found.started else "-"
    return (str(found.pid or "-"), found.record.session or "-", found.task or "-",
            found.shown_state, started, str(found.data.get("error") or "-"))


def local_json(found: Found) -> dict[str, Any]:
    """What ``list --local -o json`` shows of a record: never its token or password."""
    data = found.data
    return {
        "pid": found.pid, "session": found.record.session, "started": iso(found.started or None),
        "task": found.task, "workspace": data.get("workspace"),
        "state": found.state, "process": "gone" if found.gone else "running",
        "gone_at": iso(data.get(GONE)), "error": data.get("error"),
        "control_url": data.get("control_url"), "debug": data.get("debug"),
        "code_server_url": data.get("code_server_url"), "inputs": data.get("inputs"),
        "rank": data.get("rank"), "record": found.where,
    }


def run_local(args: argparse.Namespace, console: Console) -> int:
    home = podcode_home(console.environ)
    damaged: list[str] = []
    found = sorted(find_local(home, damaged), key=lambda f: f.started)
    for problem in damaged:
        console.warn(problem)
    now = console.clock()
    if args.output == "json":
        console.json([local_json(f) for f in found])
    elif not found:
        console.warn(f"no podcode sessions in {home}")
    else:
        console.say(table(LOCAL_HEADERS, [local_row(f, now) for f in found]))
    return Exit.OK


def run(args: argparse.Namespace, console: Console) -> int:
    if args.local:
        return run_local(args, console)
    try:
        cluster = connect(args, console)
    except KubeConfigError as exc:
        raise type(exc)(f"{exc} (podcode list --local lists the sessions on this machine)",
                        source=exc.source, problem=exc.problem) from None
    with cluster:
        namespace = None if args.all_namespaces else (args.namespace or cluster.namespace)
        sessions = sorted(cluster.list_sessions(namespace), key=lambda s: (s.namespace, s.pod))
    now = console.clock()
    if args.output == "json":
        console.json([as_json(s, now) for s in sessions])
    elif not sessions:
        where = f"namespace {namespace}" if namespace else "any namespace"
        console.warn(f"no podcode sessions in {where}")
    else:
        ray = any(s.ray for s in sessions)
        headers = (*HEADERS, "RAY") if ray else HEADERS
        console.say(table(headers, [row(s, now, ray) for s in sessions]))
    return Exit.OK
