"""Which session a verb talks to: the local one (``session.json``) or a pod's (port-forward)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from interactive.base.control_client import ControlClient
from interactive.base.record import SessionRecord, session_path
from interactive.base.sessionfile import (
    BadSessionFile,
    Found,
    NoSession,
    find_local,
    too_open,
    unique,
)
from interactive.base.settings import podcode_home
from interactive.cli.choose import choose, label, usable
from interactive.cli.errors import CliError, ControlUnreachable, Exit
from interactive.cli.terminal import Console

if TYPE_CHECKING:  # the Kubernetes client loads only for the verbs that reach a cluster
    from interactive.kube.cluster import Cluster, SessionInfo
    from interactive.kube.portforward import Forwarder


@dataclass
class Target:
    """A reachable session: its control API client and what its record says."""

    label: str
    client: ControlClient
    record: SessionRecord
    info: SessionInfo | None = None
    cluster: Cluster | None = None
    """The cluster connection, open while the target is (a pod's session)."""
    where: str = ""
    """The record's file, for a local session (it holds the password)."""


def connect(args: argparse.Namespace, console: Console) -> Cluster:
    from interactive.kube.cluster import Cluster

    return Cluster.connect(args.kubeconfig, args.context, console.environ)


def required_port(info: SessionInfo, name: str) -> int:
    port = info.ports.get(name)
    if port is None:
        raise CliError(
            f"pod {info.namespace}/{info.pod} does not publish its {name} port "
            "(podcode.io/ports annotation): is its podcode older than this CLI?", Exit.NOT_FOUND,
        )
    return port


def forward(cluster: Cluster, info: SessionInfo, port: int, local_port: int = 0,
            *, fixed: bool = False, name: str = "") -> Forwarder:
    """A started forwarder to ``port`` of the pod; ``local_port`` 0 means any free one.

    With ``fixed`` a busy local port is an error; otherwise any free port is used."""
    from interactive.kube.portforward import Forwarder

    label = f"{info.namespace}/{info.pod}:{port}" + (f" ({name})" if name else "")
    try:
        forwarder = Forwarder(lambda: cluster.open_stream(info, port), local_port=local_port,
                              name=label)
    except OSError as exc:
        if fixed or local_port == 0:
            raise CliError(f"cannot listen on local port {local_port} ({exc.strerror}): "
                           "choose another with --port", Exit.USAGE) from None
        forwarder = Forwarder(lambda: cluster.open_stream(info, port), name=label)
    return forwarder.start()


def first_contact(client: ControlClient, info: SessionInfo, port: int) -> dict[str, Any]:
    """``GET /api/status`` through the forward, with the pod named if it does not answer."""
    try:
        return client.status()
    except ControlUnreachable:
        raise ControlUnreachable(
            f"pod {info.namespace}/{info.pod}: the session's control API (port {port} in the "
            "pod) does not answer through the port-forward; is the session still open? "
            f"(kubectl logs -n {info.namespace} {info.pod})"
        ) from None


def pod_record(cluster: Cluster, info: SessionInfo,
               args: argparse.Namespace) -> tuple[str, SessionRecord]:
    """The pod's session chosen by ``--task``/``--pid`` (the only one when there is one):
    its label and its checked record."""
    records = unique(cluster.read_session_records(info, args.container))
    found = [Found(where, data, None) for where, data in records]
    base = f"pod {info.namespace}/{info.pod}"
    chosen = choose(found, args.task, args.pid, base, args.session)
    name = label(base, found, chosen)
    return name, usable(chosen, name)


def control_port(info: SessionInfo, record: SessionRecord) -> int:
    """The session's control API port in the pod: its record's, else the pod's annotation."""
    port = urlsplit(record.control_url).port
    return port or required_port(info, "control")


@contextlib.contextmanager
def open_target(args: argparse.Namespace, console: Console) -> Iterator[Target]:
    """The session named by ``args.pod`` (through the Kubernetes API), else the local one;
    ``--task``/``--pid`` choose among several."""
    if args.pod is None:
        yield _local(console, args)
        return
    with connect(args, console) as cluster:
        info = cluster.live_session(args.pod, args.namespace)
        name, record = pod_record(cluster, info, args)
        port = control_port(info, record)
        forwarder = forward(cluster, info, port, name="control API")
        try:
            client = ControlClient(forwarder.url, record.token)
            first_contact(client, info, port)
            yield Target(name, client, record, info, cluster)
        finally:
            forwarder.close()


@contextlib.contextmanager
def open_record(args: argparse.Namespace, console: Console) -> Iterator[tuple[str, SessionRecord]]:
    """The label and record of the session :func:`open_target` would reach, read without
    reaching the session itself (no port-forward): for what the record alone says."""
    if args.pod is None:
        target = _local(console, args)
        yield target.label, target.record
        return
    with connect(args, console) as cluster:
        yield pod_record(cluster, cluster.live_session(args.pod, args.namespace), args)


def no_session(verb: str, record: Path, home: Path) -> str:
    """Why ``verb`` found no local session, and the command for each case: a session on
    this machine (its home), or one in a pod."""
    pod_verb = "attach" if verb == "open" else verb
    return (f"no local podcode session (nothing in {record} or {home / 'sessions'}). On this "
            "machine: a session opens when a task with @vscode fails here (PODCODE_ENABLE=1 "
            "outside Kubernetes); if it ran with another PODCODE_HOME, set PODCODE_HOME to it. "
            f"In a pod: podcode {pod_verb} POD -n NAMESPACE (podcode list -n NAMESPACE shows "
            "the session pods there)")


def _local(console: Console, args: argparse.Namespace) -> Target:
    home = podcode_home(console.environ)
    damaged: list[str] = []
    found = find_local(home, damaged)
    for problem in damaged:
        console.warn(problem)
    if not found:
        if damaged:
            raise BadSessionFile(damaged[0])
        raise NoSession(no_session(args.verb, session_path(environ=console.environ), home))
    chosen = choose(found, args.task, args.pid, str(home), args.session)
    name = label("local session", found, chosen)
    record = usable(chosen, name)
    path = Path(chosen.where)
    if too_open(path):
        console.warn(f"{path} holds the session's secrets but others may read it: "
                     f"chmod 600 {path}")
    client = ControlClient(record.control_url, record.token)
    if not client.healthz():
        raise ControlUnreachable(
            f"the {name}'s control API at {record.control_url} does not answer"
        )
    return Target(name, client, record, where=chosen.where)
