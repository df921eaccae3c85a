"""The CLI's side of Kubernetes: kubeconfig, listing sessions, reading a session's secrets.

A session's password and control token never leave the pod through labels,
annotations or events: the CLI reads the pod's own records with ``pods/exec``
(``ls <podcode.io/home>/sessions``, then one ``cat`` of every session's
``session.json`` and ``<podcode.io/home>/session.json``), the same permission
``kubectl exec`` needs. See docs/kubernetes.md (security).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from interactive.base.phases import ENDED
from interactive.base.sessionfile import parse_records
from interactive.base.types import Environ
from interactive.kube.client import (
    KUBECONFIG_FIRST,
    SERVICE_ACCOUNT,
    TIMEOUT,
    Loaded,
    ServiceAccount,
    Source,
    load,
    user_kubeconfig,
)
from interactive.kube.errors import (
    Call,
    NotASession,
    SessionEnded,
    SessionUnreadable,
    translate,
)
from interactive.kube.labels import (
    ANN_DEFAULT_CONTAINER,
    ANN_HOME,
    ANN_IDLE_SINCE,
    ANN_JOB,
    ANN_OWNER,
    ANN_PORTS,
    ANN_REAP_AT,
    ANN_SESSIONS,
    ANN_TASK,
    LABEL_SESSION,
    LABEL_STATE,
    SELECTOR,
    JobMark,
    parse_rfc3339,
    ray_names,
    ray_of,
)
from interactive.kube.portforward import PortStream, open_port_stream

log = logging.getLogger(__name__)

PAGE_SIZE = 500
EXEC_SECONDS = 20.0
_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError)
"""What the client raises when a call fails (refused, or no answer)."""


@dataclass(frozen=True)
class SessionInfo:
    """What a pod's labels and annotations say about its podcode session."""

    pod: str
    namespace: str
    is_session: bool
    state: str | None = None
    task: str | None = None
    owner: str | None = None
    idle_since: float | None = None
    reap_at: float | None = None
    ports: Mapping[str, int] = field(default_factory=dict)
    home: str | None = None
    phase: str | None = None
    containers: tuple[str, ...] = ()
    default_container: str | None = None
    ray: str | None = None
    """A KubeRay pod: its RayCluster (and RayJob), from KubeRay's labels."""
    ray_names: frozenset[str] = frozenset()
    """The RayCluster and RayJob names the pod is found by (``--ray``)."""
    sessions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each session open in the pod by id: its task, process and ports (one annotation
    each); empty for a pod whose podcode predates them."""
    job: JobMark | None = None
    """The job over several pods the pod's session is part of (:data:`ANN_JOB`); None for
    a pod of its own, or one whose annotation is missing or damaged."""

    @property
    def ended(self) -> bool:
        return self.state in ENDED or self.phase in ("Succeeded", "Failed")

    def cleanup(self) -> tuple[float | None, float | None]:
        """``(idle since, cleanup at)`` of the pod's session cleaned up first: each session
        of a pod that holds several has its own (in its annotation); the pod's, for a pod
        whose podcode predates them. ``(None, None)``: no session is warned."""
        if not self.sessions:
            return self.idle_since, self.reap_at
        warned = []
        for data in self.sessions.values():
            reap_at = parse_rfc3339(_text(data.get("reap_at")))
            if reap_at is not None:
                warned.append((reap_at, parse_rfc3339(_text(data.get("idle_since")))))
        if not warned:
            return None, None
        reap_at, idle_since = min(warned, key=lambda pair: pair[0])
        return idle_since, reap_at

    def container(self, wanted: str | None = None) -> str | None:
        return wanted or self.default_container or (self.containers[0] if self.containers else None)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _ports(raw: str | None) -> dict[str, int]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, int) and 0 < v < 65536}


def session_from_pod(pod: Mapping[str, Any]) -> SessionInfo:
    """Pure: a pod's JSON (as the API returns it) to :class:`SessionInfo`."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    containers = tuple(c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or [])
    return SessionInfo(
        pod=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        is_session=labels.get(LABEL_SESSION) == "true",
        state=labels.get(LABEL_STATE),
        task=annotations.get(ANN_TASK),
        owner=annotations.get(ANN_OWNER),
        idle_since=parse_rfc3339(annotations.get(ANN_IDLE_SINCE)),
        reap_at=parse_rfc3339(annotations.get(ANN_REAP_AT)),
        ports=_ports(annotations.get(ANN_PORTS)),
        home=annotations.get(ANN_HOME),
        phase=(pod.get("status") or {}).get("phase"),
        containers=containers,
        default_container=annotations.get(ANN_DEFAULT_CONTAINER),
        ray=ray_of(labels),
        ray_names=ray_names(labels),
        sessions=_sessions(annotations),
        job=JobMark.decode(annotations.get(ANN_JOB)),
    )


def _sessions(annotations: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The per-session annotations (:data:`ANN_SESSIONS`) that parse, by session id."""
    found: dict[str, dict[str, Any]] = {}
    for key, raw in annotations.items():
        if not key.startswith(ANN_SESSIONS):
            continue
        try:
            data = json.loads(raw)
        except (TypeError, ValueError):
            continue
        if isinstance(data, dict):
            found[key[len(ANN_SESSIONS):]] = data
    return found


class Cluster:
    """The cluster of the current kubeconfig context, as the CLI sees it."""

    def __init__(self, loaded: Loaded) -> None:
        self.namespace = loaded.namespace
        self.host = str(loaded.configuration.host)
        self._api_client, self.api = loaded.build()

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, context: str | None = None,
        environ: Environ | None = None, *, account: ServiceAccount = SERVICE_ACCOUNT,
    ) -> Cluster:
        """The user's kubeconfig (``--kubeconfig``, ``KUBECONFIG``, ``~/.kube/config``);
        inside a pod with none, its service account. :class:`KubeConfigError` else."""
        env = os.environ if environ is None else environ
        order: Sequence[Source] = ("kubeconfig",) if kubeconfig else KUBECONFIG_FIRST
        return cls(load(order, env, kubeconfig=user_kubeconfig(kubeconfig, env),
                        context=context, account=account))

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ------------------------------------------------------------------------------

    def list_sessions(
        self, namespace: str | None, page_size: int = PAGE_SIZE
    ) -> list[SessionInfo]:
        """Pods labelled ``podcode.io/session=true`` in ``namespace`` (None: all), paginated."""
        found: list[SessionInfo] = []
        token: str | None = None
        call = self._call("list", "pods", namespace)
        while True:
            kwargs: dict[str, Any] = {"label_selector": SELECTOR, "limit": page_size}
            if token:
                kwargs["_continue"] = token
            if namespace:
                data = self._json(call, self.api.list_namespaced_pod, namespace, **kwargs)
            else:
                data = self._json(call, self.api.list_pod_for_all_namespaces, **kwargs)
            found.extend(session_from_pod(pod) for pod in data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return found

    def session(self, pod: str, namespace: str | None = None) -> SessionInfo:
        """The session in ``pod``; :class:`NotFound` or :class:`NotASession` else."""
        namespace = namespace or self.namespace
        call = self._call("get", "pods", namespace, pod=pod)
        info = session_from_pod(self._json(call, self.api.read_namespaced_pod, pod, namespace))
        if not info.is_session:
            raise NotASession(
                f"pod {namespace}/{pod} is not a podcode session (no label {SELECTOR}): "
                "see `podcode list` for the sessions"
            )
        return info

    def live_session(self, pod: str, namespace: str | None = None) -> SessionInfo:
        """The session in ``pod``, :class:`SessionEnded` when it has ended."""
        info = self.session(pod, namespace)
        if info.ended:
            raise SessionEnded(
                f"the podcode session in pod {info.namespace}/{pod} has ended "
                f"(state {info.state or info.phase}): nothing to attach to. "
                f"Its output: kubectl logs -n {info.namespace} {pod}"
            )
        return info

    def read_session_records(
        self, info: SessionInfo, container: str | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Every session record in the pod, read with ``pods/exec``: the sessions listed
        by ``ls <home>/sessions`` and the home's ``session.json`` (one ``cat``); a pod
        whose podcode predates per-session records has only the latter."""
        if not info.home:
            raise NotASession(
                f"pod {info.namespace}/{info.pod} does not say where its session lives "
                f"(no {ANN_HOME} annotation): is its podcode older than this CLI?"
            )
        folder = posixpath.join(info.home, "sessions")
        code, out, _ = self._exec(info, ["ls", "-1", folder], container)
        names = [name for name in out.split() if not name.startswith(".")] if code == 0 else []
        main = posixpath.join(info.home, "session.json")
        paths = [posixpath.join(folder, name, "session.json") for name in names] + [main]
        code, out, message = self._exec(info, ["cat", *paths], container)
        records = parse_records(out)
        where = f"{info.namespace}/{info.pod}:{info.home}"
        if records:
            return [(where, record) for record in records]
        if "No such file" in message:
            raise SessionEnded(
                f"pod {info.namespace}/{info.pod} has no session file at {main}: the "
                "session has ended or is not open yet"
            )
        if code == 0:
            raise SessionUnreadable(f"{where}: no readable session record (not JSON)")
        raise SessionUnreadable(
            f"cannot read {main} in pod {info.namespace}/{info.pod}: {message.strip()}"
        )

    def open_stream(self, info: SessionInfo, port: int) -> PortStream:
        return open_port_stream(self.api, info.pod, info.namespace, port)

    def can_i(self, verb: str, resource: str, namespace: str, subresource: str = "") -> bool:
        """A SelfSubjectAccessReview: may the current user ``verb`` ``resource``?"""
        review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, subresource=subresource or None,
                namespace=namespace,
            )
        ))
        api = client.AuthorizationV1Api(self._api_client)
        try:
            answer = api.create_self_subject_access_review(review, _request_timeout=TIMEOUT)
        except _FAILURES as exc:
            call = Call("create", "selfsubjectaccessreviews", None, host=self.host,
                        cluster_scoped=True)
            raise translate(exc, call) from None
        return bool(answer.status and answer.status.allowed)

    # --- plumbing -----------------------------------------------------------------------------

    def _call(self, verb: str, resource: str, namespace: str | None, *,
              pod: str | None = None, stream: bool = False) -> Call:
        return Call(verb, resource, namespace, "stream" if stream else "user", pod=pod,
                    host=self.host)

    def _json(self, call: Call, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            response = method(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            data: dict[str, Any] = json.loads(response.data)
            return data
        except _FAILURES as exc:
            raise translate(exc, call) from None

    def _exec(self, info: SessionInfo, argv: list[str],
              container: str | None) -> tuple[int, str, str]:
        """Run ``argv`` in the pod: (exit code, stdout, stderr or status message)."""
        try:
            ws = stream(
                self.api.connect_get_namespaced_pod_exec, info.pod, info.namespace,
                command=argv, container=info.container(container), stderr=True, stdin=False,
                stdout=True, tty=False, _preload_content=False,
            )
        except ApiException as exc:
            call = self._call("create", "pods/exec", info.namespace, pod=info.pod, stream=True)
            raise translate(exc, call) from None
        try:
            ws.run_forever(timeout=EXEC_SECONDS)
            out, err, status_text = ws.read_channel(1), ws.read_channel(2), ws.read_channel(3)
        finally:
            ws.close()
            ws.sock.shutdown()
        return _exit_code(status_text), out, err or status_text


def _exit_code(status_text: str) -> int:
    try:
        status = json.loads(status_text or "{}")
    except ValueError:
        return 1
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"])
    return 1
