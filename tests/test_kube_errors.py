"""The table from what the Kubernetes client raised to a typed error and its one line."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from interactive.base.errors import PodcodeError
from interactive.kube.errors import (
    BadRequest,
    Call,
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    ServerError,
    Transient,
    Unauthorized,
    Unreachable,
    error_class,
    status_of,
    translate,
)

HOST = "https://k8s.example:6443"
POD = Call("patch", "pods", "ml", "pod", pod="train-0")
LIST = Call("list", "pods", "ml", host=HOST)
LIST_ALL = Call("list", "pods", None, host=HOST)
GET = Call("get", "pods", "ml", pod="train-0", host=HOST)
REVIEW = Call("create", "selfsubjectaccessreviews", None, host=HOST, cluster_scoped=True)
EXEC = Call("create", "pods/exec", "ml", "stream", pod="train-0", host=HOST)
FORWARD = Call("create", "pods/portforward", "ml", "stream", pod="train-0", host=HOST)


def api(status: int, reason: str | None) -> ApiException:
    return ApiException(status=status, reason=reason)


def handshake(status: int, phrase: str) -> ApiException:
    """How the client reports a refused WebSocket upgrade (exec, port-forward)."""
    return ApiException(status=0, reason=f"Handshake status {status} {phrase} -+-+- {{}} -+-+- b''")


def refused() -> urllib3.exceptions.MaxRetryError:
    cause = urllib3.exceptions.NewConnectionError(
        None,  # type: ignore[arg-type]
        "Failed to establish a new connection: [Errno 111] Connection refused",
    )
    return urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", cause)  # type: ignore[arg-type]


UNREACHABLE_ADVICE = ("check your network or VPN and the kubeconfig context "
                      "(kubectl cluster-info)")
ROWS: list[tuple[str, BaseException, Call, type[KubeError], str]] = [
    # the pod's own service account: the session goes on without the call
    ("pod-403", api(403, "Forbidden"), POD, Forbidden,
     "Kubernetes refused to patch pods in namespace ml (403 Forbidden): the pod's service "
     "account needs permission to patch pods in namespace ml; apply the Role in podcode's "
     "docs/kubernetes.md. The session goes on without it."),
    ("pod-401", api(401, "Unauthorized"), POD, Unauthorized,
     "Kubernetes rejected the pod's credentials trying to patch pods in namespace ml (401 "
     "Unauthorized): check the service account token mount (automountServiceAccountToken)."),
    ("pod-404", api(404, "Not Found"), POD, NotFound,
     "Kubernetes does not know this pod (patch pods in namespace ml: 404 Not Found): check "
     "POD_NAME and POD_NAMESPACE (set them from the downward API)."),
    ("pod-409", api(409, "Conflict"), POD, Conflict,
     "Kubernetes API server error 409 trying to patch pods in namespace ml: Conflict. "
     "Will try again."),
    ("pod-500", api(500, "Internal Server Error"), POD, ServerError,
     "Kubernetes API server error 500 trying to patch pods in namespace ml: Internal Server "
     "Error. Will try again."),
    ("pod-503-no-reason", api(503, None), POD, ServerError,
     "Kubernetes API server error 503 trying to patch pods in namespace ml: no reason given. "
     "Will try again."),
    ("pod-unreachable", refused(), POD, Unreachable,
     "cannot reach the Kubernetes API server to patch pods in namespace ml: MaxRetryError. "
     "Will try again."),
    # the CLI's user, REST calls
    ("user-403", api(403, "Forbidden"), LIST, Forbidden,
     "permission denied: you may not list pods in namespace ml (403 Forbidden); ask your "
     "cluster admin for the podcode-user Role in docs/kubernetes.md"),
    ("user-403-all", api(403, "Forbidden"), LIST_ALL, Forbidden,
     "permission denied: you may not list pods in all namespaces (403 Forbidden); ask your "
     "cluster admin for the podcode-user Role in docs/kubernetes.md"),
    ("user-401", api(401, "Unauthorized"), LIST, Unauthorized,
     "the API server rejected your credentials (401 Unauthorized): log in to the cluster "
     "again (your kubeconfig token may have expired)"),
    ("user-404-pod", api(404, "Not Found"), GET, NotFound,
     "no pod train-0 in namespace ml: check the name (podcode list -n ml) or pass -n NAMESPACE"),
    ("user-404-list", api(404, "Not Found"), LIST, NotFound,
     "the Kubernetes API server failed to list pods in namespace ml: 404 Not Found; try "
     "again later"),
    ("user-400", api(400, "Bad Request"), LIST, BadRequest,
     "the Kubernetes API server failed to list pods in namespace ml: 400 Bad Request; try "
     "again later"),
    ("user-409", api(409, "Conflict"), LIST, Conflict,
     "the Kubernetes API server failed to list pods in namespace ml: 409 Conflict; try "
     "again later"),
    ("user-503-review", api(503, "Service Unavailable"), REVIEW, ServerError,
     "the Kubernetes API server failed to create selfsubjectaccessreviews in the cluster: "
     "503 Service Unavailable; try again later"),
    ("user-refused", refused(), LIST, Unreachable,
     f"cannot reach the Kubernetes API server at {HOST} (connection refused): "
     + UNREACHABLE_ADVICE),
    ("user-timeout", TimeoutError("timed out"), LIST, Unreachable,
     f"cannot reach the Kubernetes API server at {HOST} (timed out): " + UNREACHABLE_ADVICE),
    # the CLI's user, exec and port-forward streams (the status is in the handshake)
    ("stream-403", handshake(403, "Forbidden"), EXEC, Forbidden,
     "permission denied: you may not create pods/exec in namespace ml (403 Forbidden); ask "
     "for the podcode-user Role in docs/kubernetes.md"),
    ("stream-403-forward", handshake(403, "Forbidden"), FORWARD, Forbidden,
     "permission denied: you may not create pods/portforward in namespace ml (403 "
     "Forbidden); ask for the podcode-user Role in docs/kubernetes.md"),
    ("stream-401", handshake(401, "Unauthorized"), EXEC, Unauthorized,
     "the API server rejected your credentials (401): log in to the cluster again"),
    ("stream-404", handshake(404, "Not Found"), FORWARD, NotFound,
     "no pod train-0 in namespace ml (404): it may have been deleted"),
    ("stream-400", handshake(400, "Bad Request"), EXEC, BadRequest,
     "the API server refused to create pods/exec for pod ml/train-0 (400 Bad Request): is "
     "the pod running, and the container right (-c CONTAINER)?"),
    ("stream-500", handshake(500, "Internal Server Error"), EXEC, ServerError,
     "cannot create pods/exec for pod ml/train-0"),
    ("stream-refused", ApiException(status=0, reason="[Errno 111] Connection refused"), FORWARD,
     Unreachable,
     f"cannot reach the Kubernetes API server at {HOST} (connection refused): "
     + UNREACHABLE_ADVICE),
    ("stream-socket", ConnectionResetError("reset by peer"), FORWARD, Unreachable,
     f"cannot reach the Kubernetes API server at {HOST} (reset by peer): "
     + UNREACHABLE_ADVICE),
]


@pytest.mark.parametrize(("raised", "call", "kind", "message"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_every_failure_maps_to_its_class_and_line(
    raised: BaseException, call: Call, kind: type[KubeError], message: str
) -> None:
    error = translate(raised, call)
    assert type(error) is kind
    assert str(error) == message
    assert error.call == call
    assert error.status == status_of(raised)
    assert isinstance(error, PodcodeError)


@pytest.mark.parametrize(("status", "kind"), [
    (None, Unreachable), (400, BadRequest), (401, Unauthorized), (403, Forbidden),
    (404, NotFound), (409, Conflict), (422, ServerError), (429, ServerError),
    (500, ServerError), (503, ServerError),
])
def test_the_status_table(status: int | None, kind: type[KubeError]) -> None:
    assert error_class(status) is kind


@pytest.mark.parametrize(("kind", "later"), [
    (Unreachable, True), (Conflict, True), (ServerError, True), (BadRequest, False),
    (Unauthorized, False), (Forbidden, False), (NotFound, False),
])
def test_what_may_work_later_is_transient(kind: type[KubeError], later: bool) -> None:
    assert issubclass(kind, Transient) is later


def test_a_forbidden_error_names_what_the_role_lacks() -> None:
    error = translate(api(403, "Forbidden"), POD)
    assert isinstance(error, Forbidden)
    assert (error.verb, error.resource, error.namespace) == ("patch", "pods", "ml")
