"""How podcode marks and names a pod: labels, annotations, the event source, the selector
of sessions, annotation times (RFC 3339), and the pod as the reaper sees it.

Both sides use these names: the pod writes them (:mod:`interactive.kube.pod`), the CLI
reads them (:mod:`interactive.kube.cluster`). Nothing here imports ``kubernetes``, so the
reaper may import it freely.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

LABEL_SESSION = "podcode.io/session"
LABEL_STATE = "podcode.io/state"
ANN_TASK = "podcode.io/task"
ANN_OWNER = "podcode.io/owner"
ANN_PORTS = "podcode.io/ports"
ANN_HOME = "podcode.io/home"
ANN_REAP_AT = "podcode.io/reap-at"
ANN_IDLE_SINCE = "podcode.io/idle-since"
ANN_JOB = "podcode.io/job"
"""The job over several pods the pod's session is part of (:class:`JobMark`): every pod
of the job names the same job id, so ``podcode list`` shows them as one entry."""
ANN_DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
"""kubectl's own annotation: the container ``exec`` picks when none is named."""
ANN_SESSIONS = "sessions.podcode.io/"
"""Prefix of one annotation per session open in the pod, ``sessions.podcode.io/<id>``:
``{"task": ..., "pid": ..., "ports": {...}}``. A pod that serves several sessions (a Ray
node's workers, an asyncio fan-out) lists each; the ``podcode.io/*`` annotations hold the
one written last."""
RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_ORIGIN_KIND = "ray.io/originated-from-crd"
RAY_ORIGIN_NAME = "ray.io/originated-from-cr-name"
"""KubeRay's labels: the RayCluster of a Ray pod, head or worker, and (where KubeRay puts
them) the RayJob or RayService the cluster was made for."""
EVENT_SOURCE = "podcode"
SELECTOR = f"{LABEL_SESSION}=true"
"""The label selector of podcode sessions."""


@dataclass(frozen=True)
class JobMark:
    """A pod's part in a job over several pods, as its :data:`ANN_JOB` annotation says:
    ``{"id": "10.0.0.5:29500/restart-0", "session_pod": "train-worker-0", "ranks": [0, 1],
    "serves_session": true}``."""

    id: str
    """The job: its rendezvous store's ``host:port`` and torchrun's restart count, the
    same on every pod of one run of the job."""
    session_pod: str
    """The pod that serves the job's session (its IDE)."""
    ranks: tuple[int, ...]
    """The job's (global) ranks that run in this pod."""
    serves_session: bool
    """This pod is :attr:`session_pod`."""

    def encode(self) -> str:
        return json.dumps({"id": self.id, "session_pod": self.session_pod,
                           "ranks": list(self.ranks), "serves_session": self.serves_session},
                          sort_keys=True)

    @classmethod
    def decode(cls, raw: str | None) -> JobMark | None:
        """The mark an annotation holds; None when missing or damaged (any field of the
        wrong kind): such a pod is listed on its own."""
        try:
            data = json.loads(raw or "")
        except (TypeError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        job, pod, ranks, serves = (data.get(key) for key in
                                   ("id", "session_pod", "ranks", "serves_session"))
        if not (_name(job) and _name(pod) and isinstance(serves, bool)
                and isinstance(ranks, list) and all(_rank(r) for r in ranks)):
            return None
        return cls(str(job), str(pod), tuple(ranks), serves)


def _name(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def ray_of(labels: Mapping[str, str]) -> str | None:
    """Where a KubeRay pod belongs, for ``podcode list``: ``RayJob/train
    train-raycluster-x7k (worker)``; None for a pod that is not a Ray node."""
    cluster = labels.get(RAY_CLUSTER)
    if not cluster:
        return None
    text = f"{cluster} ({labels.get(RAY_NODE_TYPE) or 'node'})"
    if labels.get(RAY_ORIGIN_KIND) and labels.get(RAY_ORIGIN_NAME):
        text = f"{labels[RAY_ORIGIN_KIND]}/{labels[RAY_ORIGIN_NAME]} {text}"
    return text


def ray_names(labels: Mapping[str, str]) -> frozenset[str]:
    """The names ``podcode --ray NAME`` finds a KubeRay pod by: its RayCluster's, and the
    RayJob's (or RayService's) that made the cluster."""
    return frozenset(name for name in (labels.get(RAY_CLUSTER), labels.get(RAY_ORIGIN_NAME))
                     if name)


def rfc3339(when: float) -> str:
    """``2024-05-01T12:00:00Z`` for epoch seconds ``when`` (UTC, whole seconds)."""
    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 time, None when missing or unreadable."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


class PodHandle(Protocol):
    """The part of :class:`interactive.kube.pod.PodClient` the monitor and cleanup use."""

    name: str
    namespace: str

    def set_state(self, state: str) -> Any: ...

    def set_idle(self, idle_since: float | None, reap_at: float | None) -> Any: ...

    def event(self, reason: str, message: str, type: str = "Normal") -> Any: ...

    def owner_annotation(self) -> str | None: ...

    def delete(self) -> bool: ...


def describe_pod(pod: PodHandle | None, hostname: str | None = None) -> str:
    """``namespace/name``, or the host name outside Kubernetes."""
    if pod is not None:
        return f"{pod.namespace}/{pod.name}"
    return hostname or socket.gethostname()


def keepalive_command(pod: PodHandle | None) -> str:
    """The command that keeps this session from being cleaned up, as the owner types it."""
    if pod is not None:
        return f"podcode keepalive {pod.name} -n {pod.namespace}"
    return "podcode keepalive (on the machine that runs the task)"
