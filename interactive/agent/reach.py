"""Finding the sessions an agent may reach, and reaching one, as ``podcode attach`` does:
the session records under ``$PODCODE_HOME`` on this machine, and the session pods of the
namespace through the Kubernetes API (the records read with ``pods/exec``, the control
port forwarded), with the engineer's own credentials. One :class:`ControlClient` per
session, each call marked with :data:`~interactive.base.routes.ACTOR_HEADER`.

Each session has an id an agent passes back: ``local/<session>`` on this machine,
``pod/<namespace>/<pod>`` in a cluster (``pod/<namespace>/<pod>/<session>`` when a pod
holds several).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interactive.base.control_client import ControlClient
from interactive.base.errors import PodcodeError
from interactive.base.record import RecordError, load_record
from interactive.base.routes import ACTOR_HEADER
from interactive.base.sessionfile import Found, connectable, find_local, unique
from interactive.base.settings import podcode_home
from interactive.base.types import Environ

if TYPE_CHECKING:  # the Kubernetes client loads only when a cluster is asked for
    from interactive.agent.scrub import Secrets
    from interactive.kube.cluster import Cluster, SessionInfo
    from interactive.kube.portforward import Forwarder

ACTOR = "agent via MCP"
"""How the session records the calls this server makes."""
LOCAL, POD = "local", "pod"


class UnknownSession(PodcodeError):
    """No session with that id, or none chosen where several wait."""


@dataclass(frozen=True)
class Listed:
    """One session as :meth:`Reach.list` finds it, before it is reached."""

    id: str
    where: str
    """``this machine`` or ``pod NAMESPACE/POD``."""
    task: str | None
    state: str
    open: bool
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Reached:
    """A session this server talks to."""

    id: str
    client: ControlClient
    record_path: Path | None = None
    """A local session's record (read again once the session stops answering)."""
    info: SessionInfo | None = None
    forwarder: Forwarder | None = None


def local_id(found: Found) -> str:
    return f"{LOCAL}/{found.record.session or f'pid-{found.pid}'}"


def pod_id(namespace: str, pod: str, session: str | None = None) -> str:
    return f"{POD}/{namespace}/{pod}" + (f"/{session}" if session else "")


class Reach:
    """The sessions of this machine and of one namespace; reached ones are kept open."""

    def __init__(self, environ: Environ, secrets: Secrets, *, namespace: str | None = None,
                 context: str | None = None, kubeconfig: str | None = None,
                 cluster: bool = True) -> None:
        self.environ = environ
        self.secrets = secrets
        self.namespace = namespace
        self.context = context
        self.kubeconfig = kubeconfig
        self.use_cluster = cluster
        self._cluster: Cluster | None = None
        self._reached: dict[str, Reached] = {}
        self._lock = threading.Lock()
        self.cluster_note: str | None = None
        """Why the cluster's sessions are not listed (no kubeconfig, no answer), if so."""

    # -- listing ----------------------------------------------------------------------
    @property
    def home(self) -> Path:
        return podcode_home(self.environ)

    def local(self) -> list[Found]:
        """The sessions recorded on this machine; their secrets are known from here on."""
        found = find_local(self.home, [])
        for one in found:
            self.secrets.add(one.record.token, one.record.password)
        return found

    def sessions(self) -> list[Listed]:
        """Every session of this machine, then of the namespace (when a cluster answers)."""
        listed = [Listed(local_id(f), "this machine", f.task, f.shown_state, f.open,
                         {"pid": f.pid, "started": f.record.started, "error": f.record.error})
                  for f in self.local()]
        return listed + self._pods()

    def _pods(self) -> list[Listed]:
        self.cluster_note = None
        if not self.use_cluster:
            self.cluster_note = "this server looks at this machine only"
            return []
        try:
            infos = self.cluster().list_sessions(self.namespace or self.cluster().namespace)
        except PodcodeError as exc:
            self.cluster_note = f"the cluster's sessions are not listed: {exc}"
            return []
        listed = []
        for info in infos:
            ids = sorted(info.sessions) if len(info.sessions) > 1 else [None]
            for session in ids:
                data = info.sessions.get(session, {}) if session else {}
                listed.append(Listed(
                    pod_id(info.namespace, info.pod, session), f"pod {info.namespace}/{info.pod}",
                    data.get("task") or info.task, info.state or "unknown", not info.ended,
                    {"owner": info.owner, "reap_at": info.cleanup()[1], "ray": info.ray}))
        return listed

    def cluster(self) -> Cluster:
        with self._lock:
            if self._cluster is None:
                from interactive.kube.cluster import Cluster

                self._cluster = Cluster.connect(self.kubeconfig, self.context, self.environ)
            return self._cluster

    # -- reaching ---------------------------------------------------------------------
    def default_id(self) -> str:
        """The one open session's id; :class:`UnknownSession` when there are none or
        several (with their ids)."""
        open_ = [s for s in self.sessions() if s.open]
        if len(open_) == 1:
            return open_[0].id
        if not open_:
            note = f" ({self.cluster_note})" if self.cluster_note else ""
            raise UnknownSession(f"no open podcode session on this machine or in the "
                                 f"cluster{note}: a session opens when a task with @vscode fails")
        ids = ", ".join(s.id for s in open_)
        raise UnknownSession(f"{len(open_)} sessions are open: pass session= one of {ids}")

    def reach(self, session: str | None) -> Reached:
        """The session with id ``session`` (None: the only open one), reached."""
        wanted = session or self.default_id()
        with self._lock:
            found = self._reached.get(wanted)
        if found is not None:
            return found
        parts = wanted.split("/")
        if parts[0] == LOCAL and len(parts) == 2:
            reached = self._reach_local(wanted)
        elif parts[0] == POD and len(parts) in (3, 4):
            reached = self._reach_pod(parts[1], parts[2], parts[3] if len(parts) == 4 else None)
        else:
            raise UnknownSession(f"no session {wanted!r}: ids look like local/SESSION or "
                                 "pod/NAMESPACE/POD (list_sessions gives them)")
        with self._lock:
            self._reached[wanted] = reached
        return reached

    def _client(self, url: str, token: str) -> ControlClient:
        self.secrets.add(token)
        return ControlClient(url, token, headers={ACTOR_HEADER: ACTOR})

    def _reach_local(self, wanted: str) -> Reached:
        for found in self.local():
            if local_id(found) != wanted:
                continue
            if not found.open:
                raise UnknownSession(f"session {wanted} is {found.shown_state}: nothing to "
                                     "reach")
            record = found.record
            self.secrets.add(record.token, record.password)
            client = self._client(connectable(record.control_url), record.token)
            return Reached(wanted, client, record_path=Path(found.where))
        raise UnknownSession(f"no session {wanted} in {self.home} (list_sessions lists them)")

    def _reach_pod(self, namespace: str, pod: str, session: str | None) -> Reached:
        from interactive.kube.portforward import Forwarder

        cluster = self.cluster()
        info = cluster.live_session(pod, namespace)
        records = unique(cluster.read_session_records(info))
        for _, data in records:  # every secret the pod's records hold, chosen or not
            self.secrets.add(str(data.get("token") or ""), str(data.get("password") or ""))
        found = [Found(where, data, None) for where, data in records]
        chosen = [f for f in found if f.open and (session is None or f.record.session == session)]
        if len(chosen) != 1:
            ids = ", ".join(pod_id(namespace, pod, f.record.session) for f in found if f.open)
            raise UnknownSession(f"pod {namespace}/{pod}: {len(chosen)} open sessions match "
                                 f"(open there: {ids or 'none'})")
        record = chosen[0].record
        port = _port(record.control_url) or info.ports.get("control")
        if port is None:
            raise UnknownSession(f"pod {namespace}/{pod} does not say its control port")
        forwarder = Forwarder(lambda: cluster.open_stream(info, port),
                              name=f"{namespace}/{pod}:{port} (control API)").start()
        client = self._client(forwarder.url, record.token)
        return Reached(pod_id(namespace, pod, session), client, info=info, forwarder=forwarder)

    def ended_state(self, reached: Reached) -> str | None:
        """What the session's record (or pod) says once its control API answers no more.
        A session whose task returned removes its own record folder (a failed one keeps
        it, for debugging): a record gone means ``done``."""
        if reached.record_path is not None:
            try:
                data = load_record(reached.record_path)
            except RecordError:
                return None
            return "done" if data is None else str(data.get("state"))
        if reached.info is not None:
            try:
                info = self.cluster().session(reached.info.pod, reached.info.namespace)
            except PodcodeError:
                return None
            if info.phase in ("Succeeded", "Failed"):
                return "done" if info.phase == "Succeeded" else "failed"
            return info.state
        return None

    def close(self) -> None:
        with self._lock:
            reached, self._reached = list(self._reached.values()), {}
            cluster, self._cluster = self._cluster, None
        for one in reached:
            if one.forwarder is not None:
                one.forwarder.close()
        if cluster is not None:
            cluster.close()


def _port(url: str) -> int | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).port
    except ValueError:
        return None
