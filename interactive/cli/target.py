"""Which session a verb talks to: the local one (``session.json``) or a pod's (port-forward)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from interactive.cli.api import ControlClient
from interactive.cli.console import Console
from interactive.cli.errors import CliError, ControlError, Exit
from interactive.cluster import Cluster, SessionInfo
from interactive.portforward import Forwarder
from interactive.sessionfile import (
    SessionFile,
    process_alive,
    read_session_file,
    session_path,
    too_open,
)


@dataclass
class Target:
    """A reachable session: its control API client and what its record says."""

    label: str
    client: ControlClient
    record: SessionFile
    info: SessionInfo | None = None


def connect(args: argparse.Namespace, console: Console) -> Cluster:
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
    except ControlError as exc:
        if exc.kind != "unreachable":
            raise
        raise ControlError(
            f"pod {info.namespace}/{info.pod}: the session's control API (port {port} in the "
            "pod) does not answer through the port-forward; is the session still open? "
            f"(kubectl logs -n {info.namespace} {info.pod})", "unreachable",
        ) from None


@contextlib.contextmanager
def open_target(args: argparse.Namespace, console: Console) -> Iterator[Target]:
    """The session named by ``args.pod`` (through the Kubernetes API), else the local one."""
    if args.pod is None:
        yield _local(console)
        return
    with connect(args, console) as cluster:
        info = cluster.live_session(args.pod, args.namespace)
        record = cluster.read_session_file(info, args.container)
        port = required_port(info, "control")
        forwarder = forward(cluster, info, port, name="control API")
        try:
            label = f"pod {info.namespace}/{info.pod}"
            client = ControlClient(forwarder.url, record.token)
            first_contact(client, info, port)
            yield Target(label, client, record, info)
        finally:
            forwarder.close()


def _local(console: Console) -> Target:
    path = session_path(console.environ)
    record = read_session_file(path)
    if too_open(path):
        console.warn(f"{path} holds the session's secrets but others may read it: "
                     f"chmod 600 {path}")
    client = ControlClient(record.control_url, record.token)
    if record.ended:
        raise CliError(f"the local session ({path}) has ended (state {record.state})",
                       Exit.NOT_FOUND)
    if not client.healthz():
        if process_alive(record.pid) is False:
            raise CliError(
                f"the local session has ended: its process {record.pid} is gone ({path} is "
                "left over)", Exit.NOT_FOUND,
            )
        raise ControlError(
            f"the local session's control API at {record.control_url} does not answer",
            "unreachable",
        )
    return Target("local session", client, record)
