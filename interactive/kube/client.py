"""The Kubernetes client set-up, for both sides: load a configuration, find the namespace,
tune retries and timeouts, build the API objects.

Two sources, tried in the order the caller gives: ``in-cluster`` (the pod's service
account; tried when ``KUBERNETES_SERVICE_HOST`` is set) and ``kubeconfig`` (a file, or
several joined by ``os.pathsep`` as in ``KUBECONFIG``). The pod prefers its service
account (:data:`IN_CLUSTER_FIRST`), the CLI the user's kubeconfig
(:data:`KUBECONFIG_FIRST`). A source that is not there (no file, no token) gives way to
the next; one that is there but unusable (a malformed kubeconfig) is an error at once,
in one line that says where.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

from interactive.base.types import Environ
from interactive.kube.errors import KubeConfigError, KubeConfigMissing

log = logging.getLogger(__name__)

Source = Literal["in-cluster", "kubeconfig"]
IN_CLUSTER_FIRST: tuple[Source, ...] = ("in-cluster", "kubeconfig")
KUBECONFIG_FIRST: tuple[Source, ...] = ("kubeconfig", "in-cluster")
TIMEOUT = (3.0, 10.0)
"""(connect, read) seconds for every API call."""
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class ServiceAccount:
    """Where a pod's service-account files are mounted."""

    folder: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount")

    @property
    def token(self) -> Path:
        return self.folder / "token"

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def namespace_file(self) -> Path:
        return self.folder / "namespace"

    def namespace(self) -> str | None:
        """The pod's namespace as mounted, None when the file is missing or empty."""
        try:
            return self.namespace_file.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None


SERVICE_ACCOUNT = ServiceAccount()


@dataclass(frozen=True)
class Loaded:
    """A tuned client configuration, the namespace it defaults to, and where it came from."""

    configuration: client.Configuration
    namespace: str
    source: Source

    def build(self) -> tuple[client.ApiClient, client.CoreV1Api]:
        """A new API client (close it when done) and the core API on it."""
        api_client = client.ApiClient(self.configuration)
        return api_client, client.CoreV1Api(api_client)


def user_kubeconfig(explicit: str | None, environ: Environ) -> str:
    """kubectl's rule: ``--kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``."""
    return explicit or environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())


def pod_namespace(environ: Environ, account: ServiceAccount = SERVICE_ACCOUNT) -> str:
    """The pod's own namespace: ``POD_NAMESPACE`` (downward API), else the service
    account's namespace file, else ``default``."""
    return environ.get("POD_NAMESPACE") or account.namespace() or DEFAULT_NAMESPACE


def load(
    order: Sequence[Source],
    environ: Environ | None = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    account: ServiceAccount = SERVICE_ACCOUNT,
) -> Loaded:
    """The first source of ``order`` that is there; :class:`KubeConfigError` when one is
    there but unusable, :class:`KubeConfigMissing` (the last one tried) when none is."""
    env = os.environ if environ is None else environ
    missing: KubeConfigMissing | None = None
    for source in order:
        try:
            if source == "in-cluster" and env.get("KUBERNETES_SERVICE_HOST"):
                return _tuned(_in_cluster(env, account))
            if source == "kubeconfig" and kubeconfig:
                return _tuned(_from_kubeconfig(kubeconfig, context))
        except KubeConfigMissing as exc:
            log.debug("no %s Kubernetes configuration: %s", source, exc.problem)
            missing = exc
    raise missing or KubeConfigMissing(
        "no Kubernetes configuration (no in-cluster service account, no kubeconfig)"
    )


def _tuned(loaded: Loaded) -> Loaded:
    loaded.configuration.retries = 0  # the callers decide when to try again
    return loaded


def _in_cluster(environ: Environ, account: ServiceAccount) -> Loaded:
    configuration = client.Configuration()
    loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=str(account.token), cert_filename=str(account.ca_cert), environ=environ
    )
    try:
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise KubeConfigMissing(
            f"no usable in-cluster configuration: {exc}", source="in-cluster", problem=str(exc)
        ) from None
    return Loaded(configuration, account.namespace() or DEFAULT_NAMESPACE, "in-cluster")


def _from_kubeconfig(path: str, context: str | None) -> Loaded:
    if not any(Path(p).expanduser().is_file() for p in path.split(os.pathsep) if p):
        raise KubeConfigMissing(
            f"no Kubernetes configuration: {path} does not exist. Pass --kubeconfig FILE, "
            "set KUBECONFIG, or log in to your cluster first",
            source="kubeconfig", problem=f"{path} does not exist",
        )
    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration
        )
        namespace = _context_namespace(path, context)
    except yaml.YAMLError as exc:
        problem = _yaml_problem(exc)
    except (ConfigException, ValueError, OSError, KeyError) as exc:
        problem = str(exc)
    else:
        return Loaded(configuration, namespace, "kubeconfig")
    raise KubeConfigError(
        f"cannot use the kubeconfig {path}: {problem}", source="kubeconfig", problem=problem
    )


def _yaml_problem(exc: yaml.YAMLError) -> str:
    where = getattr(exc, "problem_mark", None)
    at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
    problem = getattr(exc, "problem", None) or "it cannot be parsed"
    return f"it is not valid YAML{at} ({problem})"


def _context_namespace(path: str, context: str | None) -> str:
    contexts, active = config.list_kube_config_contexts(path)  # type: ignore[no-untyped-call]
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or DEFAULT_NAMESPACE)
