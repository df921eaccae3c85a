"""``podcode list``: the sessions in the cluster; ``--local``: those on this machine."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Entry:
    """One entry of the list: a pod, or the pods of one job over several pods."""

    info: SessionInfo
    """The pod shown: for a job, the one that serves its session (POD, STATE, IDLE and
    CLEANUP are its)."""
    pods: tuple[SessionInfo, ...] = ()
    """A job: each of its listed pods, the session's first; empty for a pod of its own."""

    @property
    def ranks(self) -> int:
        """How many of the job's ranks its listed pods run."""
        return len({rank for pod in self.pods if pod.job for rank in pod.job.ranks})


def entries(sessions: Sequence[SessionInfo]) -> list[Entry]:
    """Pure: the pods whose marks name one job (same namespace, same job id) as one entry;
    every other pod (a damaged mark included) on its own. By namespace, then pod shown."""
    jobs: dict[tuple[str, str], list[SessionInfo]] = {}
    found: list[Entry] = []
    for info in sessions:
        if info.job is None:
            found.append(Entry(info))
        else:
            jobs.setdefault((info.namespace, info.job.id), []).append(info)
    found += [_job_entry(pods) for pods in jobs.values()]
    return sorted(found, key=lambda entry: (entry.info.namespace, entry.info.pod))


def _job_entry(pods: list[SessionInfo]) -> Entry:
    """A job's pods, the one that serves the session first (by its mark, else by name)."""
    def order(info: SessionInfo) -> tuple[bool, bool, str]:
        job = info.job
        return (not (job and job.serves_session), not (job and job.session_pod == info.pod),
                info.pod)

    ordered = tuple(sorted(pods, key=order))
    return Entry(ordered[0], ordered)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def job_suffix(entry: Entry) -> str:
    """`` (job: 2 pods, 4 ranks)`` after a job's TASK; empty for a pod of its own."""
    if not entry.pods:
        return ""
    return f" (job: {_plural(len(entry.pods), 'pod')}, {_plural(entry.ranks, 'rank')})"


def row(info: SessionInfo, now: float, ray: bool = False, suffix: str = "") -> tuple[str, ...]:
    """A table row; ``ray``: with the RAY column (some listed pod is a KubeRay pod);
    ``suffix``: after the task (:func:`job_suffix`)."""
    task = info.task or "-"
    if len(info.sessions) > 1:  # several sessions in the pod: attach asks which
        task += f" (+{len(info.sessions) - 1} more)"
    idle_since, reap_at = info.cleanup()
    cells = (
        info.pod, info.namespace, info.state or "-", task + suffix, info.owner or "-",
        since(idle_since, now), until(reap_at, now),
    )
    return (*cells, info.ray or "-") if ray else cells


def entry_row(entry: Entry, now: float, ray: bool = False) -> tuple[str, ...]:
    return row(entry.info, now, ray, job_suffix(entry))


def as_json(info: SessionInfo, now: float) -> dict[str, Any]:
    idle_since, reap_at = info.cleanup()
    return {
        "pod": info.pod, "namespace": info.namespace, "state": info.state, "task": info.task,
        "owner": info.owner, "phase": info.phase,
        "idle_since": iso(idle_since),
        "idle_seconds": None if idle_since is None else round(now - idle_since),
        "reap_at": iso(reap_at), "ports": dict(info.ports), "ray": info.ray,
        "sessions": {name: dict(data) for name, data in info.sessions.items()},
        "job": None,
    }


def entry_json(entry: Entry, now: float) -> dict[str, Any]:
    """A pod's object; a job's: its session pod's, with the job's id and its ``pods``."""
    data = as_json(entry.info, now)
    job = entry.info.job
    if not entry.pods or job is None:
        return data
    return {**data, "job": job.id, "pods": [
        {"pod": pod.pod, "state": pod.state, "ranks": list(pod.job.ranks if pod.job else ()),
         "serves_session": bool(pod.job and pod.job.serves_session)}
        for pod in entry.pods
    ]}


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
        sessions = cluster.list_sessions(namespace)
    now = console.clock()
    listed = entries(sessions)
    if args.output == "json":
        console.json([entry_json(entry, now) for entry in listed])
    elif not listed:
        where = f"namespace {namespace}" if namespace else "any namespace"
        console.warn(f"no podcode sessions in {where}")
    else:
        ray = any(entry.info.ray for entry in listed)
        headers = (*HEADERS, "RAY") if ray else HEADERS
        console.say(table(headers, [entry_row(entry, now, ray) for entry in listed]))
    return Exit.OK
