"""The pod's own side of Kubernetes: find itself, label, annotate, emit events, delete.

Every method is blocking (callers run it in an executor), uses short timeouts
and never raises for an API error: a refusal (403), a server error (5xx) or
an unreachable API server is logged once per kind, saying which permission is
missing, and the call returns normally. No secret is ever written into labels,
annotations, events or logs.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar, cast

import urllib3
from kubernetes.client.exceptions import ApiException

from interactive.kube.client import (
    IN_CLUSTER_FIRST,
    SERVICE_ACCOUNT,
    TIMEOUT,
    Loaded,
    ServiceAccount,
    load,
    pod_namespace,
)
from interactive.kube.errors import Call, KubeConfigError, KubeError, NotFound, translate
from interactive.kube.labels import (
    ANN_HOME,
    ANN_IDLE_SINCE,
    ANN_JOB,
    ANN_OWNER,
    ANN_PORTS,
    ANN_REAP_AT,
    ANN_SESSIONS,
    ANN_TASK,
    EVENT_SOURCE,
    LABEL_SESSION,
    LABEL_STATE,
    JobMark,
    rfc3339,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class PodClient:
    """The pod this process runs in, as seen through the Kubernetes API."""

    def __init__(self, name: str, namespace: str, loaded: Loaded) -> None:
        self.name = name
        self.namespace = namespace
        self._api_client, self._api = loaded.build()
        self._reported: set[tuple[type[KubeError], str, str]] = set()
        self._lock = threading.Lock()
        self._uid: str | None = None
        self._uid_tried = False
        self.problems: list[str] = []
        """Each distinct refusal, in words (for the session's notes)."""
        self._session: tuple[str, dict[str, Any]] | None = None
        """The session marked by this client, and its own annotation's data."""

    @classmethod
    def discover(
        cls, environ: Mapping[str, str] | None = None, *,
        account: ServiceAccount = SERVICE_ACCOUNT,
    ) -> PodClient | None:
        """This pod, or None outside Kubernetes.

        The name comes from ``POD_NAME`` (downward API), else the host name when
        ``KUBERNETES_SERVICE_HOST`` is set; the namespace from ``POD_NAMESPACE``,
        else the service-account namespace file. Credentials: in-cluster, else
        ``KUBECONFIG``. No API call is made here.
        """
        env = os.environ if environ is None else environ
        in_cluster = bool(env.get("KUBERNETES_SERVICE_HOST"))
        name = env.get("POD_NAME") or (socket.gethostname() if in_cluster else None)
        if not name:
            return None
        namespace = pod_namespace(env, account)
        kubeconfig = env.get("KUBECONFIG") or None
        try:
            loaded = load(IN_CLUSTER_FIRST, env, kubeconfig=kubeconfig, account=account)
        except KubeConfigError as exc:
            if exc.source == "kubeconfig":
                log.warning("podcode cannot use KUBECONFIG=%s: %s; Kubernetes updates are off",
                            kubeconfig, exc.problem)
            else:
                log.warning(
                    "pod %s/%s: no Kubernetes credentials (no in-cluster config, no KUBECONFIG); "
                    "labels, events and cleanup through the API are off", namespace, name,
                )
            return None
        return cls(name, namespace, loaded)

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]

    # --- the interface ------------------------------------------------------------------------

    def mark_session(
        self, *, task: str, state: str, owner: str | None, ports: Mapping[str, int], home: str,
        session: str | None = None, job: JobMark | None = None,
    ) -> None:
        """Label and annotate the pod as a podcode session (``session``: its own annotation
        too, see :data:`ANN_SESSIONS`; ``job``: the job over several pods it is part of,
        see :data:`ANN_JOB`); emit ``PodcodeWaiting``."""
        annotations = {
            ANN_TASK: task,
            ANN_PORTS: json.dumps(dict(ports), sort_keys=True),
            ANN_HOME: home,
        }
        if session:
            self._session = (session, {"task": task, "pid": os.getpid(), "ports": dict(ports)})
            annotations[ANN_SESSIONS + session] = json.dumps(self._session[1], sort_keys=True)
        if owner:
            annotations[ANN_OWNER] = owner
        if job is not None:
            annotations[ANN_JOB] = job.encode()
        labels = {LABEL_SESSION: "true", LABEL_STATE: state}
        self._patch({"metadata": {"labels": labels, "annotations": annotations}})
        where = f"-n {self.namespace} " if self.namespace != "default" else ""
        self.event(
            "PodcodeWaiting",
            f"podcode session for {task} is {state}: podcode attach {where}{self.name}",
        )

    def set_state(self, state: str) -> None:
        self._patch({"metadata": {"labels": {LABEL_STATE: state}}})

    def end_session(self, session: str, state: str) -> None:
        """The session ``session`` closed: the pod's label says ``state`` and the session's
        own annotation goes, in one patch (never one without the other)."""
        if self._session is not None and self._session[0] == session:
            self._session = None  # a late idle update must not write it back
        self._patch({"metadata": {"labels": {LABEL_STATE: state},
                                  "annotations": {ANN_SESSIONS + session: None}}})

    def set_idle(self, idle_since: float | None, reap_at: float | None) -> None:
        """Idle since, and cleanup at (None, None: not warned), in one patch: the pod's
        annotations, and the marked session's own (a pod that holds several sessions
        shows each one's)."""
        when = {"idle_since": None if idle_since is None else rfc3339(idle_since),
                "reap_at": None if reap_at is None else rfc3339(reap_at)}
        annotations: dict[str, str | None] = {
            ANN_IDLE_SINCE: when["idle_since"], ANN_REAP_AT: when["reap_at"]}
        if self._session is not None:
            session, data = self._session
            data = {**{k: v for k, v in data.items() if k not in when},
                    **{k: v for k, v in when.items() if v is not None}}
            self._session = (session, data)
            annotations[ANN_SESSIONS + session] = json.dumps(data, sort_keys=True)
        self._patch({"metadata": {"annotations": annotations}})

    def event(self, reason: str, message: str, type: str = "Normal") -> None:
        """Record a Kubernetes event on this pod (``kubectl describe pod`` shows it)."""
        now = rfc3339(datetime.now(timezone.utc).timestamp())
        involved: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod", "name": self.name, "namespace": self.namespace,
        }
        uid = self._pod_uid()
        if uid:
            involved["uid"] = uid
        event_name = f"{self.name}.{uuid.uuid4().hex[:16]}"
        body = {
            "metadata": {"name": event_name, "namespace": self.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_SOURCE,
        }
        self._call("create", "events", self._api.create_namespaced_event, self.namespace, body)

    def owner_annotation(self) -> str | None:
        """``podcode.io/owner`` from the pod (set by the user in the manifest)."""
        pod = self._read()
        annotations = (pod or {}).get("metadata", {}).get("annotations") or {}
        owner = annotations.get(ANN_OWNER)
        return owner.strip() if isinstance(owner, str) and owner.strip() else None

    def delete(self, grace_seconds: int | None = None) -> bool:
        """Delete this pod; False when the API refused (already gone counts as done)."""
        ok, _ = self._call(
            "delete", "pods", self._api.delete_namespaced_pod, self.name, self.namespace,
            grace_period_seconds=grace_seconds, missing_ok=True,
        )
        return ok

    # --- plumbing -----------------------------------------------------------------------------

    def _patch(self, body: dict[str, Any]) -> None:
        self._call("patch", "pods", self._api.patch_namespaced_pod, self.name, self.namespace, body)

    def _read(self) -> dict[str, Any] | None:
        ok, response = self._call(  # raw JSON: no slow model parsing
            "get", "pods", self._api.read_namespaced_pod, self.name, self.namespace,
            _preload_content=False,
        )
        if not ok or response is None:
            return None
        try:
            pod: dict[str, Any] = json.loads(cast(Any, response).data)
        except ValueError:
            return None
        uid = pod.get("metadata", {}).get("uid")
        if isinstance(uid, str):
            self._uid = uid
        return pod

    def _pod_uid(self) -> str | None:
        if self._uid is None and not self._uid_tried:
            self._uid_tried = True
            self._read()
        return self._uid

    def _call(
        self, verb: str, resource: str, method: Callable[..., T], *args: Any,
        missing_ok: bool = False, **kwargs: Any,
    ) -> tuple[bool, T | None]:
        try:
            return True, method(*args, _request_timeout=TIMEOUT, **kwargs)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            error = translate(exc, Call(verb, resource, self.namespace, "pod", pod=self.name))
        if missing_ok and isinstance(error, NotFound):
            log.info("pod %s/%s is already gone", self.namespace, self.name)
            return True, None
        self._report(error)
        return False, None

    def _report(self, error: KubeError) -> None:
        """Log ``error`` as a warning the first time its class is seen for its call."""
        call = error.call
        key = (type(error), call.verb if call else "", call.resource if call else "")
        message = str(error)
        with self._lock:
            first = key not in self._reported
            self._reported.add(key)
            if first:
                self.problems.append(message)
        if first:
            log.warning("%s", message)
        else:
            log.debug("%s", message)
