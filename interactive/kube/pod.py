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
from pathlib import Path
from typing import Any, TypeVar, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

log = logging.getLogger(__name__)

T = TypeVar("T")

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
TIMEOUT = (3.0, 10.0)
"""(connect, read) seconds for every API call."""

LABEL_SESSION = "podcode.io/session"
LABEL_STATE = "podcode.io/state"
ANN_TASK = "podcode.io/task"
ANN_OWNER = "podcode.io/owner"
ANN_PORTS = "podcode.io/ports"
ANN_HOME = "podcode.io/home"
ANN_REAP_AT = "podcode.io/reap-at"
ANN_IDLE_SINCE = "podcode.io/idle-since"
EVENT_SOURCE = "podcode"


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


def explain_failure(
    status: int | None, verb: str, resource: str, namespace: str, detail: str
) -> str:
    """One line: what the API server refused and what to do about it."""
    what = f"{verb} {resource} in namespace {namespace}"
    if status == 403:
        return (
            f"Kubernetes refused to {what} (403 Forbidden): the pod's service account needs "
            f"permission to {what}; apply the Role in podcode's docs/kubernetes.md. "
            "The session goes on without it."
        )
    if status == 401:
        return (
            f"Kubernetes rejected the pod's credentials trying to {what} (401 Unauthorized): "
            "check the service account token mount (automountServiceAccountToken)."
        )
    if status == 404:
        return (
            f"Kubernetes does not know this pod ({what}: 404 Not Found): check POD_NAME and "
            "POD_NAMESPACE (set them from the downward API)."
        )
    if status is None:
        return f"cannot reach the Kubernetes API server to {what}: {detail}. Will try again."
    return f"Kubernetes API server error {status} trying to {what}: {detail}. Will try again."


def _read_namespace(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _load_configuration(
    environ: Mapping[str, str], in_cluster: bool
) -> client.Configuration | None:
    configuration = client.Configuration()
    if in_cluster:
        try:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return _tune(configuration)
        except ConfigException as exc:
            log.debug("no in-cluster Kubernetes configuration: %s", exc)
    kubeconfig = environ.get("KUBECONFIG")
    if not kubeconfig:
        return None
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    except (ConfigException, OSError, ValueError) as exc:
        log.warning(
            "podcode cannot use KUBECONFIG=%s: %s; Kubernetes updates are off", kubeconfig, exc
        )
        return None
    return _tune(configuration)


def _tune(configuration: client.Configuration) -> client.Configuration:
    configuration.retries = 0
    return configuration


class PodClient:
    """The pod this process runs in, as seen through the Kubernetes API."""

    def __init__(self, name: str, namespace: str, configuration: client.Configuration) -> None:
        self.name = name
        self.namespace = namespace
        self._api_client = client.ApiClient(configuration)
        self._api = client.CoreV1Api(self._api_client)
        self._reported: set[tuple[str, ...]] = set()
        self._lock = threading.Lock()
        self._uid: str | None = None
        self._uid_tried = False
        self.problems: list[str] = []
        """Each distinct refusal, in words (for the session's notes)."""

    @classmethod
    def discover(
        cls, environ: Mapping[str, str] | None = None, *, namespace_file: Path = SA_NAMESPACE_FILE
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
        namespace = env.get("POD_NAMESPACE") or _read_namespace(namespace_file) or "default"
        configuration = _load_configuration(env, in_cluster)
        if configuration is None:
            log.warning(
                "pod %s/%s: no Kubernetes credentials (no in-cluster config, no KUBECONFIG); "
                "labels, events and cleanup through the API are off", namespace, name,
            )
            return None
        return cls(name, namespace, configuration)

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]

    # --- the interface ------------------------------------------------------------------------

    def mark_session(
        self, *, task: str, state: str, owner: str | None, ports: Mapping[str, int], home: str
    ) -> None:
        """Label and annotate the pod as a podcode session; emit ``PodcodeWaiting``."""
        annotations = {
            ANN_TASK: task,
            ANN_PORTS: json.dumps(dict(ports), sort_keys=True),
            ANN_HOME: home,
        }
        if owner:
            annotations[ANN_OWNER] = owner
        labels = {LABEL_SESSION: "true", LABEL_STATE: state}
        self._patch({"metadata": {"labels": labels, "annotations": annotations}})
        where = f"-n {self.namespace} " if self.namespace != "default" else ""
        self.event(
            "PodcodeWaiting",
            f"podcode session for {task} is {state}: podcode attach {where}{self.name}",
        )

    def set_state(self, state: str) -> None:
        self._patch({"metadata": {"labels": {LABEL_STATE: state}}})

    def set_reap_at(self, when: float | None) -> None:
        self._annotate(ANN_REAP_AT, None if when is None else rfc3339(when))

    def set_idle_since(self, when: float | None) -> None:
        self._annotate(ANN_IDLE_SINCE, None if when is None else rfc3339(when))

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

    def _annotate(self, key: str, value: str | None) -> None:
        self._patch({"metadata": {"annotations": {key: value}}})

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
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                log.info("pod %s/%s is already gone", self.namespace, self.name)
                return True, None
            status = exc.status or None
            self._report(status, verb, resource, str(exc.reason or "").strip() or "no reason given")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._report(None, verb, resource, type(exc).__name__)
        return False, None

    def _report(self, status: int | None, verb: str, resource: str, detail: str) -> None:
        kind = "5xx" if status is not None and status >= 500 else str(status)
        key = (kind, verb, resource)
        message = explain_failure(status, verb, resource, self.namespace, detail)
        with self._lock:
            first = key not in self._reported
            self._reported.add(key)
            if first:
                self.problems.append(message)
        if first:
            log.warning("%s", message)
        else:
            log.debug("%s", message)
