"""``podcode doctor``: is everything a session needs here, and if not, what is the fix.

Each check returns a :class:`Check` (``ok``, ``warn``, ``fail`` or ``skip``)
and never raises; the CLI prints them as a table.
"""

from __future__ import annotations

import logging
import re
import shutil
import smtplib
import socket
import ssl
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from interactive.base.errors import SettingError
from interactive.base.settings import build_settings
from interactive.base.types import Environ
from interactive.kube.cluster import Cluster
from interactive.kube.errors import KubeError, Transient

log = logging.getLogger(__name__)

_VERSION = re.compile(r"^\s*v?\d+\.\d+")

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
NODE_MAJOR = 24
"""code-server from the npm registry (4.139) needs Node 24 to install."""
USER_ROLE_FIX = "ask your cluster admin for the podcode-user Role in docs/kubernetes.md"
POD_ROLE_FIX = "bind the podcode-session Role (docs/kubernetes.md) to the pod's service account"
POD_VERBS: tuple[tuple[str, str, str], ...] = (
    ("get", "pods", ""), ("patch", "pods", ""), ("delete", "pods", ""), ("create", "events", ""),
)
PORTS = (("port", "port (code-server)"), ("control_port", "port (control API)"),
         ("debug_port", "port (debugpy)"), ("ssh_port", "port (SSH)"))
USER_VERBS: tuple[tuple[str, str, str], ...] = (
    ("list", "pods", ""), ("get", "pods", ""),
    # The Python client's WebSocket upgrade is authorised as "get" by some API servers and
    # as "create" by others: both are needed.
    ("create", "pods", "portforward"), ("get", "pods", "portforward"),
    ("create", "pods", "exec"), ("get", "pods", "exec"),
    ("get", "pods", "log"),
)
UNREACHABLE_FIX = ("check the API server address in your kubeconfig, your network or VPN "
                   "(kubectl cluster-info)")


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _version_of(argv: Sequence[str], timeout: float = 20.0) -> str | None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    versions = [line for line in lines if _VERSION.match(line)]
    return (versions or lines or ["unknown"])[0].strip()


def check_code_server(environ: Environ) -> Check:
    from server_bootstrap.config import CodeServerConfig  # one distribution: always there
    from server_bootstrap.locate import find_code_server, version_of

    try:
        config = CodeServerConfig.from_environ(environ)
        found = find_code_server(config, environ)
    except Exception as exc:  # a bad PODCODE_CODE_SERVER_* setting: say which
        return Check("code-server", FAIL, str(exc), "fix the PODCODE_CODE_SERVER_* setting")
    if found is None:
        return _not_installed(config)
    version = version_of(found, environ)
    if version is None:
        return Check("code-server", FAIL, f"{found} does not run (`--version` failed)",
                     "reinstall it: podcode install")
    return Check("code-server", OK, f"{found} ({version})")


def _not_installed(config: Any) -> Check:
    """Where code-server was looked for, what moves that place, and how to fill it."""
    from server_bootstrap.install import SIZES
    from server_bootstrap.installs import install_name

    where = config.cache.expanduser() / install_name(config.version)
    return Check(
        "code-server", WARN,
        f"not installed: not on PATH, and not in {where} (the cache: "
        "PODCODE_CODE_SERVER_CACHE moves it; PODCODE_CODE_SERVER_PATH names a binary). A "
        f"session that opens installs it there first ({config.resolved_method()}: "
        f"{SIZES[config.resolved_method()]}; with no network it opens without the IDE)",
        f"podcode install (into {config.cache.expanduser()}), or set "
        "PODCODE_CODE_SERVER_CACHE to a cache that has it, or bake it into the image "
        "(docs/deploy.md)",
    )


def check_node(environ: Environ) -> Check:
    """What installing code-server from the npm registry will use: npm is required; a
    Node older than the one code-server needs is fine, since the installer brings its own
    (the ``node-linux-*`` npm package), as the code-server check's advice assumes."""
    npm = shutil.which("npm", path=environ.get("PATH"))
    node = shutil.which("node", path=environ.get("PATH"))
    if npm is None or node is None:
        return Check("node", WARN, "no node and npm on PATH: code-server can be installed "
                     "from a release tarball only", "podcode install --method tarball "
                     "(or install Node and npm)")
    version = _version_of([node, "--version"]) or "unknown"
    match = re.match(r"v(\d+)", version)
    if match and int(match.group(1)) < NODE_MAJOR:
        return Check("node", OK, f"{node} ({version}): installing code-server from the npm "
                     f"registry brings its own Node {NODE_MAJOR}")
    return Check("node", OK, f"{node} ({version})")


def check_nvml() -> Check:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except ImportError:
        return Check("gpu (nvml)", WARN, "nvidia-ml-py is not installed",
                     "pip install nvidia-ml-py")
    except Exception as exc:  # every NVML error: no driver, no GPU
        return Check("gpu (nvml)", WARN, f"NVML unavailable ({type(exc).__name__}): GPU use "
                     "does not count as activity (fine on a machine without a GPU)")
    return Check("gpu (nvml)", OK, f"{count} GPU(s) visible")


def check_smtp(
    environ: Environ, timeout: float = 10.0, context: ssl.SSLContext | None = None
) -> Check:
    """Connect to PODCODE_SMTP_URL and say EHLO (then STARTTLS and login when configured)."""
    url = environ.get("PODCODE_SMTP_URL")
    if not url:
        return Check("smtp", WARN, "PODCODE_SMTP_URL is not set: owners get no email before "
                     "cleanup", "set PODCODE_SMTP_URL=smtp://user:pass@host:587?starttls=true")
    try:
        from interactive.base.smtp import smtp_config

        smtp = smtp_config(url, environ)
    except SettingError as exc:
        return Check("smtp", FAIL, str(exc), "fix PODCODE_SMTP_URL (or PODCODE_SMTP_PASSWORD_FILE)")
    try:
        said = _say_ehlo(smtp, timeout, context or ssl.create_default_context())
    except smtplib.SMTPAuthenticationError:
        return Check("smtp", FAIL, f"{smtp.safe_url}: the server refused the login",
                     "fix the user name or password in PODCODE_SMTP_URL")
    except (OSError, smtplib.SMTPException, ssl.SSLError) as exc:
        return Check("smtp", FAIL, f"{smtp.safe_url}: {type(exc).__name__}: {exc}",
                     "check host, port and TLS settings in PODCODE_SMTP_URL")
    return Check("smtp", OK, f"{smtp.safe_url}: {said}")


def _say_ehlo(smtp: Any, timeout: float, context: ssl.SSLContext) -> str:
    factory: Callable[..., smtplib.SMTP] = smtplib.SMTP_SSL if smtp.ssl else smtplib.SMTP
    kwargs: dict[str, Any] = {"context": context} if smtp.ssl else {}
    with factory(smtp.host, smtp.port, timeout=timeout, **kwargs) as server:
        code, _ = server.ehlo()
        said = [f"EHLO {code}"]
        if smtp.starttls:
            server.starttls(context=context)
            server.ehlo()
            said.append("STARTTLS")
        if smtp.username and smtp.password is not None and server.has_extn("auth"):
            server.login(smtp.username, smtp.password)
            said.append("login ok")
    return ", ".join(said)


def check_ports(environ: Environ) -> list[Check]:
    try:
        settings = build_settings({}, environ)
    except SettingError as exc:
        return [Check("ports", FAIL, str(exc), "fix the PODCODE_* setting it names")]
    return [_port_check(name, label, settings.ports.bind, getattr(settings.ports, name))
            for name, label in PORTS]


def _port_check(name: str, label: str, host: str, port: int) -> Check:
    if port == 0:
        return Check(label, OK, "0: any free port")
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        return Check(label, WARN, f"{host}:{port} is in use ({exc.strerror})",
                     f"free it, or set PODCODE_{name.upper()} to another port (0: any)")
    return Check(label, OK, f"{host}:{port} is free")


def check_permissions(
    cluster: Cluster, namespace: str, verbs: Iterable[tuple[str, str, str]], who: str, fix: str
) -> list[Check]:
    checks: list[Check] = []
    for verb, resource, sub in verbs:
        what = f"{verb} {resource}{'/' + sub if sub else ''}"
        name = f"k8s {who}: {what}"
        try:
            allowed = cluster.can_i(verb, resource, namespace, sub)
        except KubeError as exc:
            advice = UNREACHABLE_FIX if isinstance(exc, Transient) else fix
            return [*checks, Check(name, FAIL, str(exc), advice)]
        if allowed:
            checks.append(Check(name, OK, f"allowed in namespace {namespace}"))
        else:
            checks.append(Check(name, FAIL, f"not allowed in namespace {namespace}", fix))
    return checks


def in_pod(environ: Environ) -> bool:
    """Whether this runs inside a Kubernetes pod (else: an engineer's laptop)."""
    return bool(environ.get("POD_NAME") or environ.get("KUBERNETES_SERVICE_HOST"))


def check_kubernetes(connect: Callable[[], Cluster], environ: Environ,
                     namespace: str | None, pod: bool | None = None) -> list[Check]:
    """The user's permissions (laptop) or the pod's (inside a pod), by access reviews."""
    pod_side = in_pod(environ) if pod is None else pod
    try:
        cluster = connect()
    except KubeError as exc:
        status = FAIL if pod_side else WARN
        return [Check("kubernetes", status, str(exc), "pass --kubeconfig or set KUBECONFIG "
                      "(needed by podcode list and attach, and in a pod for cleanup)")]
    with cluster:
        namespace = namespace or environ.get("POD_NAMESPACE") or cluster.namespace
        verbs, who, fix = (POD_VERBS, "pod", POD_ROLE_FIX) if pod_side else (
            USER_VERBS, "you", USER_ROLE_FIX)
        permissions = check_permissions(cluster, namespace, verbs, who, fix)
        if permissions and permissions[0].fix == UNREACHABLE_FIX:  # not one answer came back
            return [Check("kubernetes", FAIL, permissions[0].detail, UNREACHABLE_FIX)]
        return [Check("kubernetes", OK, f"API server {cluster.host}"), *permissions]


def run_checks(environ: Environ, connect: Callable[[], Cluster],
               namespace: str | None = None, pod: bool | None = None) -> list[Check]:
    """The checks of one side, in the order the table shows them: in a pod, what a
    session needs there (code-server, GPU, mail, ports, the pod's permissions); on a
    laptop, what the CLI needs (the cluster and your permissions), and code-server when
    ``PODCODE_ENABLE=1`` opens sessions there. ``pod`` None: detect."""
    pod_side = in_pod(environ) if pod is None else pod
    if not pod_side:  # with PODCODE_ENABLE=1 sessions open here too: their IDE first
        here = [check_code_server(environ)] if environ.get("PODCODE_ENABLE") == "1" else []
        return [*here, *check_kubernetes(connect, environ, namespace, pod=False)]
    return [
        check_code_server(environ),
        check_node(environ),
        check_nvml(),
        check_smtp(environ),
        *check_ports(environ),
        *check_kubernetes(connect, environ, namespace, pod=True),
    ]
