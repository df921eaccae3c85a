"""``podcode attach`` and ``podcode debug``: port-forwards that run until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import json
import posixpath
from pathlib import Path
from urllib.parse import urlsplit

from interactive.base.control_client import ControlClient
from interactive.base.record import SessionRecord
from interactive.cli.entry import Entry, browse, login_link
from interactive.cli.errors import Exit
from interactive.cli.launch_json import attach_configuration, merge_launch
from interactive.cli.target import (
    connect,
    control_port,
    first_contact,
    forward,
    pod_record,
    required_port,
)
from interactive.cli.terminal import Console
from interactive.kube.cluster import Cluster, SessionInfo
from interactive.kube.errors import KubeError, NotFound, SessionEnded


def attach(args: argparse.Namespace, console: Console) -> int:
    """``podcode attach POD`` (``open POD``): forward the pod's IDE until Ctrl-C."""
    with connect(args, console) as cluster, contextlib.ExitStack() as stack:
        info = cluster.live_session(args.pod, args.namespace)
        _, record = pod_record(cluster, info, args)
        port = control_port(info, record)
        control = stack.enter_context(forward(cluster, info, port, name="control API"))
        client = ControlClient(control.url, record.token)
        status = first_contact(client, info, port)
        ide_url = None
        if record.code_server_url is not None:
            remote = urlsplit(record.code_server_url).port or required_port(info, "code_server")
            ide = stack.enter_context(forward(cluster, info, remote, args.port or remote,
                                               fixed=args.port is not None, name="code-server"))
            ide_url = ide.url + "/"
        entry = Entry(f"attached to {info.namespace}/{info.pod}", record, status, ide_url,
                      control.url, login_link(client, record, ide_url),
                      f"{posixpath.join(info.home or '~/.podcode', 'session.json')} in the pod",
                      f"port {record.debug_port or info.ports.get('debug') or '-'} in the pod "
                      f"(podcode debug {info.pod} -n {info.namespace} forwards it)")
        if args.output == "json":
            console.say(json.dumps({"pod": info.pod, "namespace": info.namespace,
                                    **entry.as_json()}))
        else:
            console.say(entry.text())
            console.say("podcode: press Ctrl-C to stop forwarding (the session keeps running)")
        browse(console, args, entry)
        return hold(console, cluster, info, client)


def debug(args: argparse.Namespace, console: Console) -> int:
    with connect(args, console) as cluster, contextlib.ExitStack() as stack:
        info = cluster.live_session(args.pod, args.namespace)
        _, record = pod_record(cluster, info, args)
        port = control_port(info, record)
        control = stack.enter_context(forward(cluster, info, port, name="control API"))
        client = ControlClient(control.url, record.token)
        first_contact(client, info, port)
        remote = record.debug_port or info.ports.get("debug") or required_port(info, "debug")
        local = stack.enter_context(forward(cluster, info, remote, args.port or remote,
                                             fixed=args.port is not None, name="debugpy"))
        _describe_debug(console, args, info, record, local.port)
        return hold(console, cluster, info, client)


def _describe_debug(console: Console, args: argparse.Namespace, info: SessionInfo,
                    record: SessionRecord, port: int) -> None:
    root = Path(args.local_root).resolve()
    write = args.write
    local_root = "${workspaceFolder}" if write and root == Path.cwd().resolve() else str(root)
    name = f"podcode: attach to {info.pod}"
    configuration = attach_configuration(name, "127.0.0.1", port, local_root, record.workspace)
    if args.output == "json":
        console.say(json.dumps({"pod": info.pod, "namespace": info.namespace,
                                "debug_port": port, "configuration": configuration}))
    elif write:
        path = root / ".vscode" / "launch.json"
        if merge_launch(path, configuration):
            console.warn(f"{path} had comments; they are not kept (the old file is in "
                         f"{path.name}.bak)")
        console.say(f"podcode: added \"{name}\" to {path}")
    else:
        console.say("podcode: add this to .vscode/launch.json (or rerun with --write):")
        console.say(json.dumps(configuration, indent=2))
    if args.output != "json":
        console.say(f"podcode: debugpy of {info.namespace}/{info.pod} is on 127.0.0.1:{port}. "
                    "In VS Code: "
                    f"Run and Debug, \"{name}\": it stops in the failed frame.")
        console.say("podcode: press Ctrl-C to stop forwarding (the session keeps running)")


def hold(console: Console, cluster: Cluster, info: SessionInfo, client: ControlClient) -> int:
    """Keep the forwards up until Ctrl-C or ``console.stop``; say when the session is lost."""
    healthy = True
    try:
        while not console.stop.wait(console.watch_seconds):
            now_healthy = client.healthz()
            if now_healthy == healthy:
                continue
            healthy = now_healthy
            if healthy:
                console.warn("the session answers again: reconnected")
                continue
            state = "unknown"
            try:
                state = cluster.live_session(info.pod, info.namespace).state or state
            except (NotFound, SessionEnded) as exc:
                console.warn(f"{exc}")
                return Exit.NOT_FOUND
            except KubeError:
                pass
            console.warn(f"lost the connection to the session (pod state {state}); "
                         "reconnecting...")
    except KeyboardInterrupt:
        pass
    return Exit.OK
