"""``--ray NAME``: the session's pod found by the RayCluster or RayJob it belongs to.

Under KubeRay an engineer knows the job (``train``) or its cluster
(``train-raycluster-x7k``), not which of its worker pods a task failed in. The pod verbs
take ``--ray NAME`` instead of a pod: the one pod of that RayCluster or RayJob (from
KubeRay's ``ray.io/*`` labels) that holds a podcode session still open.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from interactive.cli.errors import CliError, Exit
from interactive.cli.terminal import Console
from interactive.kube.errors import NotFound, SessionEnded

if TYPE_CHECKING:
    from interactive.kube.cluster import SessionInfo

NEEDS_A_PERSON = ("waiting", "warned")
"""States of a session that waits for someone: chosen over the others of the same job."""


def ray_pod(sessions: Sequence[SessionInfo], name: str, namespace: str) -> SessionInfo:
    """The pod of RayCluster or RayJob ``name`` whose session is open (pure).

    Among several open, the one that waits for a person; several of those are a usage
    error that lists them. None open: :class:`SessionEnded` when the job had sessions,
    :class:`NotFound` when it had none."""
    members = [s for s in sessions if name in s.ray_names]
    open_ = [s for s in members if not s.ended]
    waiting = [s for s in open_ if s.state in NEEDS_A_PERSON]
    chosen = waiting if waiting else open_
    if len(chosen) == 1:
        return chosen[0]
    if len(chosen) > 1:
        listed = "; ".join(f"{s.pod} ({s.state}, {s.task or 'task unknown'})"
                           for s in sorted(chosen, key=lambda s: s.pod))
        raise CliError(f"{len(chosen)} pods of {name} in namespace {namespace} hold a session: "
                       f"name the pod instead of --ray ({listed})", Exit.USAGE)
    if members:
        raise SessionEnded(f"the podcode sessions of {name} in namespace {namespace} have "
                           f"ended ({', '.join(sorted(s.pod for s in members))})")
    raise NotFound(f"no pod of a RayCluster or RayJob named {name} holds a podcode session in "
                   f"namespace {namespace} (KubeRay's ray.io/cluster and "
                   f"ray.io/originated-from-cr-name labels; see podcode list -n {namespace})")


def resolve(args: argparse.Namespace, console: Console) -> None:
    """Turn ``--ray NAME`` into the pod (and namespace) it names, in ``args``."""
    name = args.ray
    if args.pod is not None:
        raise CliError(f"name the pod ({args.pod}) or --ray {name}, not both", Exit.USAGE)
    from interactive.cli.target import connect

    with connect(args, console) as cluster:
        namespace = args.namespace or cluster.namespace
        chosen = ray_pod(cluster.list_sessions(namespace), name, namespace)
    args.pod, args.namespace = chosen.pod, chosen.namespace
    console.warn(f"{name}: the session in pod {chosen.namespace}/{chosen.pod}")
