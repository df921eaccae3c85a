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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.stream import stream

from interactive.base.errors import PodcodeError
from interactive.base.sessionfile import (
    ENDED_STATES,
    parse_records,
)
from interactive.base.types import Environ
from interactive.kube.pod import (
    ANN_HOME,
    ANN_IDLE_SINCE,
    ANN_OWNER,
    ANN_PORTS,
    ANN_REAP_AT,
    ANN_TASK,
    LABEL_SESSION,
    LABEL_STATE,
    SA_NAMESPACE_FILE,
    TIMEOUT,
    parse_rfc3339,
)
from interactive.kube.portforward import (
    PortStream,
    describe_refusal,
    handshake_status,
    open_port_stream,
)

log = logging.getLogger(__name__)

SELECTOR = f"{LABEL_SESSION}=true"
PAGE_SIZE = 500
EXEC_SECONDS = 20.0
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


class ClusterError(PodcodeError):
    """A user-facing failure. ``kind``: config, unreachable, forbidden, not_found,
    not_session, ended or failed."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


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

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES or self.phase in ("Succeeded", "Failed")

    def container(self, wanted: str | None = None) -> str | None:
        return wanted or self.default_container or (self.containers[0] if self.containers else None)


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
        default_container=annotations.get(DEFAULT_CONTAINER),
    )


def _kubeconfig_path(kubeconfig: str | None, environ: Environ) -> str:
    return kubeconfig or environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())


def _context_namespace(path: str, context: str | None) -> str:
    contexts, active = config.list_kube_config_contexts(path)  # type: ignore[no-untyped-call]
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def load_configuration(
    kubeconfig: str | None = None, context: str | None = None, environ: Environ | None = None
) -> tuple[client.Configuration, str]:
    """The client configuration and default namespace; :class:`ClusterError` (config)."""
    env = os.environ if environ is None else environ
    path = _kubeconfig_path(kubeconfig, env)
    configuration = client.Configuration()
    configuration.retries = 0
    if not any(Path(p).expanduser().is_file() for p in path.split(os.pathsep) if p):
        if env.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
            return _in_cluster(configuration)
        raise ClusterError(
            f"no Kubernetes configuration: {path} does not exist. Pass --kubeconfig FILE, "
            "set KUBECONFIG, or log in to your cluster first", "config",
        )
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration
        )
        namespace = _context_namespace(path, context)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or "it cannot be parsed"
        raise ClusterError(
            f"cannot use the kubeconfig {path}: it is not valid YAML{at} ({problem})", "config"
        ) from None
    except (ConfigException, ValueError, OSError, KeyError) as exc:
        raise ClusterError(f"cannot use the kubeconfig {path}: {exc}", "config") from None
    return configuration, namespace


def _in_cluster(configuration: client.Configuration) -> tuple[client.Configuration, str]:
    try:
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    except ConfigException as exc:
        raise ClusterError(f"no usable in-cluster configuration: {exc}", "config") from None
    try:
        namespace = SA_NAMESPACE_FILE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        namespace = "default"
    return configuration, namespace


class Cluster:
    """The cluster of the current kubeconfig context, as the CLI sees it."""

    def __init__(self, configuration: client.Configuration, namespace: str = "default") -> None:
        self.namespace = namespace
        self.host = str(configuration.host)
        self._api_client = client.ApiClient(configuration)
        self.api = client.CoreV1Api(self._api_client)

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, context: str | None = None,
        environ: Environ | None = None,
    ) -> Cluster:
        configuration, namespace = load_configuration(kubeconfig, context, environ)
        return cls(configuration, namespace)

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
        where = f"namespace {namespace}" if namespace else "all namespaces"
        while True:
            kwargs: dict[str, Any] = {"label_selector": SELECTOR, "limit": page_size}
            if token:
                kwargs["_continue"] = token
            if namespace:
                data = self._json("list pods", where, self.api.list_namespaced_pod, namespace,
                                  **kwargs)
            else:
                data = self._json("list pods", where, self.api.list_pod_for_all_namespaces,
                                  **kwargs)
            found.extend(session_from_pod(pod) for pod in data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return found

    def session(self, pod: str, namespace: str | None = None) -> SessionInfo:
        """The session in ``pod``; :class:`ClusterError` when it is not one or is gone."""
        namespace = namespace or self.namespace
        data = self._json("get pods", f"namespace {namespace}", self.api.read_namespaced_pod,
                          pod, namespace, missing=(pod, namespace))
        info = session_from_pod(data)
        if not info.is_session:
            raise ClusterError(
                f"pod {namespace}/{pod} is not a podcode session (no label {SELECTOR}): "
                "see `podcode list` for the sessions", "not_session",
            )
        return info

    def live_session(self, pod: str, namespace: str | None = None) -> SessionInfo:
        info = self.session(pod, namespace)
        if info.ended:
            raise ClusterError(
                f"the podcode session in pod {info.namespace}/{pod} has ended "
                f"(state {info.state or info.phase}): nothing to attach to. "
                f"Its output: kubectl logs -n {info.namespace} {pod}", "ended",
            )
        return info

    def read_session_records(
        self, info: SessionInfo, container: str | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """Every session record in the pod, read with ``pods/exec``: the sessions listed
        by ``ls <home>/sessions`` and the home's ``session.json`` (one ``cat``); a pod
        whose podcode predates per-session records has only the latter."""
        if not info.home:
            raise ClusterError(
                f"pod {info.namespace}/{info.pod} does not say where its session lives "
                f"(no {ANN_HOME} annotation): is its podcode older than this CLI?", "not_session",
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
            raise ClusterError(
                f"pod {info.namespace}/{info.pod} has no session file at {main}: the "
                "session has ended or is not open yet", "ended",
            )
        if code == 0:
            raise ClusterError(f"{where}: no readable session record (not JSON)", "failed")
        raise ClusterError(
            f"cannot read {main} in pod {info.namespace}/{info.pod}: {message.strip()}",
            "failed",
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
        except ApiException as exc:
            raise self._translate(exc, "create selfsubjectaccessreviews", "the cluster") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from None
        return bool(answer.status and answer.status.allowed)

    # --- plumbing -----------------------------------------------------------------------------

    def _json(self, action: str, where: str, method: Any, *args: Any,
              missing: tuple[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
        try:
            response = method(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            data: dict[str, Any] = json.loads(response.data)
            return data
        except ApiException as exc:
            if missing is not None and exc.status == 404:
                pod, namespace = missing
                raise ClusterError(
                    f"no pod {pod} in namespace {namespace}: check the name "
                    f"(podcode list -n {namespace}) or pass -n NAMESPACE", "not_found",
                ) from None
            raise self._translate(exc, action, where) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._unreachable(exc) from None

    def _translate(self, exc: ApiException, action: str, where: str) -> ClusterError:
        status = exc.status
        if status == 403:
            return ClusterError(
                f"permission denied: you may not {action} in {where} (403 Forbidden); ask your "
                "cluster admin for the podcode-user Role in docs/kubernetes.md", "forbidden",
            )
        if status == 401:
            return ClusterError(
                "the API server rejected your credentials (401 Unauthorized): log in to the "
                "cluster again (your kubeconfig token may have expired)", "forbidden",
            )
        return ClusterError(
            f"the Kubernetes API server failed to {action} in {where}: {status} "
            f"{exc.reason or ''}".strip() + "; try again later", "unreachable",
        )

    def _unreachable(self, exc: BaseException) -> ClusterError:
        reason = getattr(exc, "reason", None) or exc
        text = str(reason)
        if "Connection refused" in text:
            text = "connection refused"
        return ClusterError(
            f"cannot reach the Kubernetes API server at {self.host} ({text}): check your "
            "network or VPN and the kubeconfig context (kubectl cluster-info)", "unreachable",
        )

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
            status = handshake_status(exc)
            if status is None:
                raise self._unreachable(exc) from None
            kind = "forbidden" if status in (401, 403) else "not_found" if status == 404 \
                else "failed"
            detail = describe_refusal(status, "create pods/exec", info.pod, info.namespace)
            raise ClusterError(detail, kind) from None
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
