"""Kubernetes failures as typed errors: one table from an API status to a class, and each
class with the advice its caller can act on.

:func:`translate` turns what the client raised into the class of its status: an
``ApiException`` (its HTTP status), a refused WebSocket handshake (exec, port-forward: the
client hides the status in the reason) or a urllib3 or socket error (no answer at all).
The words depend on who made the call (:class:`Call`): the pod's own service account
(``pod``: the session goes on without it), the CLI's user making a REST call (``user``),
or the CLI's user opening an exec or port-forward stream into a pod (``stream``).

The classes follow the meaning, not the client: the CLI maps them to exit codes by type
(:mod:`interactive.cli.errors`), the pod logs each class once per call.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Literal

from interactive.base.errors import PodcodeError

Audience = Literal["pod", "user", "stream"]
_HANDSHAKE = re.compile(r"Handshake status (\d{3})")
_CLIENT_SEPARATOR = " -+-+- "
"""The client joins a refused handshake's status, headers and body with this."""


@dataclass(frozen=True)
class Call:
    """What was asked of the API server, in the words of the messages."""

    verb: str
    """``get``, ``list``, ``patch``, ``create``..."""
    resource: str
    """``pods``, ``events``, ``pods/exec``..."""
    namespace: str | None
    """None: every namespace (or no namespace, with ``cluster_scoped``)."""
    audience: Audience = "user"
    pod: str | None = None
    """The pod the call is about, when it names one."""
    host: str | None = None
    """The API server's address, for "cannot reach" messages."""
    cluster_scoped: bool = False

    @property
    def action(self) -> str:
        return f"{self.verb} {self.resource}"

    @property
    def where(self) -> str:
        if self.cluster_scoped:
            return "the cluster"
        return f"namespace {self.namespace}" if self.namespace else "all namespaces"

    @property
    def what(self) -> str:
        return f"{self.action} in {self.where}"


@dataclass(frozen=True)
class Failure:
    """What went wrong, as the client reported it."""

    status: int | None
    """The HTTP status; None when no answer came."""
    reason: str
    """The API server's reason phrase (``Forbidden``), or why no answer came."""
    cause: str
    """The client's exception class (``MaxRetryError``...)."""


class KubeError(PodcodeError):
    """A failure of the Kubernetes API or of its set-up, in one line that says what to do.

    ``status`` is the HTTP status when the API server answered; ``call`` what was asked.
    The class itself stands for a status with no class of its own."""

    def __init__(
        self, message: str, *, status: int | None = None, call: Call | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.call = call

    @classmethod
    def explain(cls, call: Call, failure: Failure) -> str:
        """The line for ``failure`` of ``call``; here: the server did not do it."""
        if call.audience == "pod":
            return (f"Kubernetes API server error {failure.status} trying to {call.what}: "
                    f"{failure.reason or 'no reason given'}. Will try again.")
        if call.audience == "stream":
            return f"cannot {call.action} for pod {call.namespace}/{call.pod}"
        return (f"the Kubernetes API server failed to {call.what}: {failure.status} "
                f"{failure.reason}".strip() + "; try again later")


# --- refusals: the API server answered no -------------------------------------------------


class Unauthorized(KubeError):
    """401: the credentials were rejected."""

    @classmethod
    def explain(cls, call: Call, failure: Failure) -> str:
        if call.audience == "pod":
            return (f"Kubernetes rejected the pod's credentials trying to {call.what} (401 "
                    "Unauthorized): check the service account token mount "
                    "(automountServiceAccountToken).")
        if call.audience == "stream":
            return "the API server rejected your credentials (401): log in to the cluster again"
        return ("the API server rejected your credentials (401 Unauthorized): log in to the "
                "cluster again (your kubeconfig token may have expired)")


class Forbidden(KubeError):
    """403: the Role lacks ``verb`` on ``resource`` in ``namespace``."""

    @property
    def verb(self) -> str | None:
        return self.call.verb if self.call else None

    @property
    def resource(self) -> str | None:
        return self.call.resource if self.call else None

    @property
    def namespace(self) -> str | None:
        return self.call.namespace if self.call else None

    @classmethod
    def explain(cls, call: Call, failure: Failure) -> str:
        if call.audience == "pod":
            return (f"Kubernetes refused to {call.what} (403 Forbidden): the pod's service "
                    f"account needs permission to {call.what}; apply the Role in podcode's "
                    "docs/kubernetes.md. The session goes on without it.")
        who = "ask your cluster admin for" if call.audience == "user" else "ask for"
        return (f"permission denied: you may not {call.what} (403 Forbidden); {who} the "
                "podcode-user Role in docs/kubernetes.md")


class NotFound(KubeError):
    """404: no such pod (or resource)."""

    @classmethod
    def explain(cls, call: Call, failure: Failure) -> str:
        if call.audience == "pod":
            return (f"Kubernetes does not know this pod ({call.what}: 404 Not Found): check "
                    "POD_NAME and POD_NAMESPACE (set them from the downward API).")
        if call.pod is None:
            return super().explain(call, failure)
        if call.audience == "stream":
            return (f"no pod {call.pod} in namespace {call.namespace} (404): it may have been "
                    "deleted")
        return (f"no pod {call.pod} in namespace {call.namespace}: check the name "
                f"(podcode list -n {call.namespace}) or pass -n NAMESPACE")


class BadRequest(KubeError):
    """400: for exec and port-forward, the pod is not running or the container is wrong."""

    @classmethod
    def explain(cls, call: Call, failure: Failure) -> str:
        if call.audience != "stream":
            return super().explain(call, failure)
        return (f"the API server refused to {call.action} for pod {call.namespace}/{call.pod} "
                "(400 Bad Request): is the pod running, and the container right "
                "(-c CONTAINER)?")


# --- transient: the same call may work later ----------------------------------------------


class Transient(KubeError):
    """The API server did not do it now (no answer, a server error, a conflict)."""


class Unreachable(Transient):
    """No answer: connection refused, a timeout, a name that does not resolve."""

    @classmethod
    def explain(cls, call: Call, failure: Failure) -> str:
        if call.audience == "pod":
            return (f"cannot reach the Kubernetes API server to {call.what}: {failure.cause}. "
                    "Will try again.")
        at = f" at {call.host}" if call.host else ""
        return (f"cannot reach the Kubernetes API server{at} ({failure.reason}): check your "
                "network or VPN and the kubeconfig context (kubectl cluster-info)")


class Conflict(Transient):
    """409: the object changed under the call."""


class ServerError(Transient):
    """5xx, and any other status without a class of its own."""


BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
}
"""The table: an HTTP status to its class (others: :class:`ServerError`)."""


def error_class(status: int | None) -> type[KubeError]:
    """The class for ``status``; None (no answer) is :class:`Unreachable`."""
    if status is None:
        return Unreachable
    return BY_STATUS.get(status, ServerError)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed call, also of a refused WebSocket upgrade (the client
    hides it in the reason); None when no answer came."""
    client = sys.modules.get("kubernetes.client.exceptions")  # loaded if it could raise
    if client is not None and isinstance(exc, client.ApiException) and exc.status:
        return int(exc.status)
    match = _HANDSHAKE.search(str(getattr(exc, "reason", "") or exc))
    return int(match.group(1)) if match else None


def _reason(exc: BaseException, status: int | None) -> str:
    if status is not None:
        return str(getattr(exc, "reason", "") or "").split(_CLIENT_SEPARATOR)[0].strip()
    text = str(getattr(exc, "reason", None) or exc)
    return "connection refused" if "Connection refused" in text else text


def translate(exc: BaseException, call: Call) -> KubeError:
    """The typed error for ``exc`` raised by ``call``, with the advice for its caller."""
    status = status_of(exc)
    failure = Failure(status, _reason(exc, status), type(exc).__name__)
    cls = error_class(status)
    return cls(cls.explain(call, failure), status=status, call=call)


# --- set-up and sessions: no API status behind these --------------------------------------


class KubeConfigError(KubeError):
    """No usable client configuration. ``source``: the one that failed (None: none is set
    up here); ``problem``: what is wrong with it, in words."""

    def __init__(self, message: str, *, source: str | None = None, problem: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.problem = problem or message


class KubeConfigMissing(KubeConfigError):
    """The source is not there (no kubeconfig file, no service-account token): the next
    source in the order is tried."""


class NotASession(KubeError):
    """The pod is not a podcode session (no session label, or no home annotation)."""


class SessionEnded(KubeError):
    """The pod's session has ended, or its record is gone."""


class SessionUnreadable(KubeError):
    """The pod's session record cannot be read."""
