"""Task settings: decorator arguments, each overridable by ``PODCODE_<NAME>``.

An environment variable wins over the decorator argument, so an operator can
tune a deployed image without editing code. Every value is checked when the
decorator is applied, the decorator's own too when a variable overrides it. A bad
argument raises :class:`SettingError` naming it; a bad variable is returned by
:func:`read_settings` instead (the decorator then leaves podcode off in that
process, saying so in one line: :mod:`interactive.base.activation`), and raised
only by :func:`build_settings`.

The names are flat for the user (``@vscode(port=...)``, ``PODCODE_PORT``); inside,
:func:`build_settings` puts each in its typed group (``settings.ports.port``), and
each part of the session takes the group it needs.
"""

from __future__ import annotations

import dataclasses
import importlib
import ipaddress
import logging
import os
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interactive.base.errors import SettingError
from interactive.base.types import Environ, Hook, TaskRef

MODES = ("on_failure", "startup")
IDES = ("code-server", "jupyter", "none")
AUTHS = ("password", "none")
SNAPSHOT_AT = ("call", "failure")
MIN_POLL_SECONDS = 0.1
MAX_POLL_SECONDS = 3600.0
MAX_SECONDS = 30 * 86400.0
"""The longest idle limit and grace period: 30 days."""
MAX_PREEMPT_GRACE_SECONDS = 86400.0
MAX_RETRIES = 1000
MAX_BYTES = 1 << 50
"""Sampling more often than this burns a core for nothing."""
_TRUE = {"1", "true", "yes", "on"}
log = logging.getLogger(__name__)
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class PortSettings:
    """Where the session listens."""

    port: int = 8080
    """code-server's port (0: any free port)."""
    control_port: int = 8081
    """The control API's port (0: any free port)."""
    debug_port: int = 5678
    """debugpy's port (0: any free port)."""
    ssh_port: int = 2222
    """The SSH endpoint's port (0: any free port)."""
    bind: str = "127.0.0.1"
    """Address every listener binds; reach it through a port-forward."""


@dataclass(frozen=True)
class EditorSettings:
    """The IDE the session serves."""

    ide: str = "code-server"
    """``code-server`` serves VS Code in the browser; ``jupyter`` serves JupyterLab on the
    failed frame (``pip install 'podcode[jupyter]'``); ``none`` is debugpy + API only."""
    auth: str = "password"
    """The IDE's authentication: ``password`` (generated; JupyterLab's token) or ``none``."""
    extensions: tuple[str, ...] = ()
    """Extra VS Code extensions: ``.vsix`` paths, URLs (``url#sha256=...``) or ids."""
    language_server: bool = True
    """Python hover, Go to Definition, completion and diagnostics in code-server
    (basedpyright: ``pip install 'podcode[lsp]'``, without which it is off)."""
    ssh: bool = True
    """Serve SSH (desktop editors, ssh, sftp) with key authentication; needs asyncssh
    (``pip install 'podcode[ssh]'``), without which it is off."""
    agents: bool = True
    """Let coding agents into the session (``podcode mcp``): ``False`` answers every call
    that carries the agent's header with 403, naming this setting."""
    ssh_authorized_keys: str | None = None
    """Public keys SSH accepts besides those ``podcode ssh`` pushes: the keys themselves
    (``authorized_keys`` lines) or the path of a file holding them."""


@dataclass(frozen=True)
class IdleSettings:
    """When a session counts as idle, and how long it has before cleanup. Units are in
    the names."""

    max_idle_seconds: float = 1800.0
    """Idle time before the owner is warned."""
    grace_seconds: float = 600.0
    """Time between the warning and the cleanup."""
    poll_seconds: float = 10.0
    """How often activity is sampled (at least 0.1)."""
    gpu_idle_percent: float = 5.0
    """GPU utilisation at or below this counts as idle."""
    cpu_idle_percent: float = 5.0
    """CPU use of the user's processes at or below this counts as idle."""
    dcgm_url: str | None = None
    """dcgm-exporter's metrics URL (``http://host:9400/metrics``), read for the GPU activity
    of MIG slices, where NVML has no utilisation."""


@dataclass(frozen=True)
class MailSettings:
    """Who is told about an idle session. The SMTP server (``PODCODE_SMTP_URL``, which
    holds a password) and ``PODCODE_MAIL_FROM`` are read from the environment when a mail
    is sent, never kept here."""

    owner: str | None = None
    """Email address warned before cleanup (else PODCODE_OWNER, else the pod annotation)."""


@dataclass(frozen=True)
class HookSettings:
    """The user's code that saves work before the pod goes away."""

    on_reap: Hook | None = None
    """Called (bounded in time) before an idle session is cleaned up."""
    on_preempt: Hook | None = None
    """Called within ``preempt_grace_seconds`` after SIGTERM."""
    preempt_grace_seconds: float = 25.0
    """Time the preemption hooks get after SIGTERM."""


@dataclass(frozen=True)
class RaySettings:
    """Bounds on the sessions of a Ray job (``interactive.ray``)."""

    ray_max_sessions: int = 8
    """Sessions open at once in one Ray job, different bugs (0: no bound)."""
    ray_max_sessions_per_node: int = 2
    """Sessions open at once on one Ray node (0: no bound)."""


@dataclass(frozen=True)
class Settings:
    """What one decorated task does when it fails: the task's own settings, and the
    groups each part of the session takes. Units are in the names."""

    mode: str = "on_failure"
    """``on_failure``: run, open a session if it raises. ``startup``: open first."""
    retries: int = 0
    """Fresh attempts with the same inputs before a session opens."""
    max_capture_bytes: int = 1 << 30
    """Bytes of captured inputs a session may write; arguments beyond it are not saved."""
    snapshot_inputs: str = "call"
    """``call``: resume and "debug again" get the arguments as they were at the call,
    even when the task changed them in place; ``failure``: as they are when it fails."""
    max_snapshot_bytes: int = 64 << 20
    """Bytes of writable buffers (arrays, tensors) copied at each call; a larger argument
    is only fingerprinted, and the session says if the task changed it."""
    cache: bool = False
    """Return a stored output for the same inputs instead of running."""
    cache_version: str = "1"
    """Bump to invalidate every cached output of this task."""
    workspace: Path | None = None
    """Folder opened in the IDE; default: the task's source folder."""
    ports: PortSettings = field(default_factory=PortSettings)
    """The listeners (the session, the IDE's launch, ``podcode doctor``)."""
    editor: EditorSettings = field(default_factory=EditorSettings)
    """The IDE (the session and the IDE's launch)."""
    idle: IdleSettings = field(default_factory=IdleSettings)
    """The idle monitor and its decision."""
    mail: MailSettings = field(default_factory=MailSettings)
    """The owner's notifier."""
    hooks: HookSettings = field(default_factory=HookSettings)
    """Cleanup and preemption."""
    ray: RaySettings = field(default_factory=RaySettings)
    """Ray jobs' bounds on sessions."""
    names: tuple[str, ...] = field(default=(), repr=False, compare=False)
    """Settings that were given explicitly (argument or environment)."""

    def value(self, name: str) -> Any:
        """The setting ``name`` (a decorator keyword), wherever its group keeps it."""
        group = GROUP_OF.get(name)
        if group is None and name not in TASK_NAMES:
            raise KeyError(name)
        return getattr(self if group is None else getattr(self, group), name)


GROUPS: Mapping[str, type[Any]] = {
    "ports": PortSettings,
    "editor": EditorSettings,
    "idle": IdleSettings,
    "mail": MailSettings,
    "hooks": HookSettings,
    "ray": RaySettings,
}
"""Attribute of :class:`Settings` -> the group it holds."""
GROUP_OF: Mapping[str, str] = {
    f.name: group for group, kind in GROUPS.items() for f in dataclasses.fields(kind)
}
"""Setting name -> the attribute of :class:`Settings` whose group holds it."""
TASK_NAMES: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Settings) if f.name not in GROUPS and f.name != "names"
)
"""The settings :class:`Settings` keeps itself."""
NAMES: tuple[str, ...] = (*TASK_NAMES, *GROUP_OF)
"""Every setting: the decorator's keywords, each also ``PODCODE_<NAME>`` (flat)."""


def env_name(name: str) -> str:
    return f"PODCODE_{name.upper()}"


def parse_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise SettingError(name, value, "expected true or false (1/0, yes/no)")


def _number(
    kind: type[int] | type[float], minimum: float, maximum: float, *, above: bool = False
) -> Callable[[str, object], Any]:
    """A finite number from ``minimum`` (excluded when ``above``) to ``maximum``: an
    infinite or huge value would spin a loop or overflow a timeout later."""
    low, high = (f"{int(x)}" if float(x).is_integer() else f"{x:g}" for x in (minimum, maximum))
    expected = f"expected a finite number {'>' if above else '>='} {low} and <= {high}"

    def parse(name: str, value: object) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise SettingError(name, value, expected)
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except (ValueError, OverflowError):
            raise SettingError(name, value, expected) from None
        if not minimum <= number <= maximum or (above and number == minimum):
            raise SettingError(name, value, expected)  # NaN compares false: refused here
        if kind is int:
            if number != int(number):
                raise SettingError(name, value, "expected a whole number")
            return int(number)
        return number

    return parse


def _choice(options: tuple[str, ...]) -> Callable[[str, object], str]:
    def parse(name: str, value: object) -> str:
        if value not in options:
            raise SettingError(name, value, f"expected one of {', '.join(options)}")
        return str(value)

    return parse


def _http_url(name: str, value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SettingError(name, value, "expected an http:// or https:// URL")
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingError(name, value, "expected an http:// or https:// URL")
    return value.strip()


def _bind(name: str, value: object) -> str:
    """An IPv4 address (or ``localhost``): code-server, debugpy's listener and the
    Kubernetes port-forward all reach the session over IPv4, so an IPv6 address is
    refused here rather than failing once the task has failed."""
    expected = "expected an IPv4 address such as 127.0.0.1 or 0.0.0.0, or localhost"
    if not isinstance(value, str) or not value.strip():
        raise SettingError(name, value, expected)
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        if value.strip() != "localhost":
            raise SettingError(name, value, expected) from None
        return "localhost"
    if address.version == 6:
        raise SettingError(name, value, "IPv6 is not supported for the session's listeners "
                           "(use 127.0.0.1, the default, or 0.0.0.0)")
    return value.strip()


def _optional_str(name: str, value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SettingError(name, value, "expected a string")
    return value.strip()


def _text(name: str, value: object) -> str:
    if not isinstance(value, (str, int)) or str(value).strip() == "":
        raise SettingError(name, value, "expected a non-empty string")
    return str(value).strip()


def _extensions(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise SettingError(name, value, "expected a list of .vsix paths, URLs or extension ids")
    if not all(isinstance(item, str) for item in items):
        raise SettingError(name, value, "every extension must be a string")
    return tuple(str(item) for item in items if item)


def _hook(name: str, value: object) -> Hook | None:
    if value is None or value == "":
        return None
    if callable(value):
        return value
    if isinstance(value, str) and ":" in value:
        module_name, _, attr = value.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except Exception as exc:  # the module's own import may raise anything
            raise SettingError(name, value, f"cannot import it ({type(exc).__name__}: {exc}); "
                               "expected 'package.module:function'") from None
        if callable(target):
            return target  # type: ignore[no-any-return]
    raise SettingError(name, value, "expected a callable or 'package.module:function'")


def _workspace(name: str, value: object) -> Path | None:
    if value is None or value == "":
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise SettingError(name, value, "expected a folder path")
    try:
        path = Path(value).expanduser().resolve()
        found = path.is_dir()
    except (OSError, RuntimeError) as exc:  # ~nobody, a folder we may not look into
        raise SettingError(name, value, f"cannot be resolved ({exc})") from None
    if not found:
        raise SettingError(name, value, "folder does not exist")
    return path


PARSERS: Mapping[str, Callable[[str, object], Any]] = {
    "mode": _choice(MODES),
    "ide": _choice(IDES),
    "port": _number(int, 0, 65535),
    "control_port": _number(int, 0, 65535),
    "debug_port": _number(int, 0, 65535),
    "ssh_port": _number(int, 0, 65535),
    "ssh": parse_bool,
    "language_server": parse_bool,
    "agents": parse_bool,
    "ssh_authorized_keys": _optional_str,
    "bind": _bind,
    "auth": _choice(AUTHS),
    "max_idle_seconds": _number(float, 0, MAX_SECONDS, above=True),
    "grace_seconds": _number(float, 0, MAX_SECONDS),
    "poll_seconds": _number(float, MIN_POLL_SECONDS, MAX_POLL_SECONDS),
    "gpu_idle_percent": _number(float, 0, 100),
    "cpu_idle_percent": _number(float, 0, 100),
    "owner": _optional_str,
    "retries": _number(int, 0, MAX_RETRIES),
    "max_capture_bytes": _number(int, 0, MAX_BYTES),
    "snapshot_inputs": _choice(SNAPSHOT_AT),
    "max_snapshot_bytes": _number(int, 0, MAX_BYTES),
    "cache": parse_bool,
    "cache_version": _text,
    "extensions": _extensions,
    "on_reap": _hook,
    "on_preempt": _hook,
    "preempt_grace_seconds": _number(float, 0, MAX_PREEMPT_GRACE_SECONDS, above=True),
    "workspace": _workspace,
    "dcgm_url": _http_url,
    "ray_max_sessions": _number(int, 0, MAX_RETRIES),
    "ray_max_sessions_per_node": _number(int, 0, MAX_RETRIES),
}


def build_settings(arguments: Mapping[str, object], environ: Environ | None = None) -> Settings:
    """Check decorator ``arguments``, apply ``PODCODE_*`` overrides, return Settings; a bad
    argument or variable raises :class:`SettingError`."""
    settings, refused = read_settings(arguments, environ)
    if refused:
        raise refused[0]
    return settings


def read_settings(
    arguments: Mapping[str, object], environ: Environ | None = None
) -> tuple[Settings, tuple[SettingError, ...]]:
    """Settings from decorator ``arguments`` and the ``PODCODE_*`` overrides, and the
    variables refused: a bad argument raises :class:`SettingError` (a mistake in the
    code), a bad variable is left out (the argument or default stays) and returned."""
    environ = os.environ if environ is None else environ
    unknown = sorted(set(arguments) - set(NAMES))
    if unknown:
        raise SettingError(
            unknown[0], arguments[unknown[0]], f"unknown setting; known: {', '.join(NAMES)}"
        )
    values: dict[str, Any] = {}
    refused: list[SettingError] = []
    for name in NAMES:
        raw = environ.get(env_name(name))
        if name in arguments:
            values[name] = _checked_argument(name, arguments[name], overridden=raw is not None)
        if raw is not None:
            try:
                values[name] = _parse_variable(name, raw)
            except SettingError as exc:
                refused.append(exc)
    return grouped(values), tuple(refused)


def _parse_variable(name: str, raw: str) -> Any:
    """``PODCODE_<NAME>``'s value parsed; whatever goes wrong is a :class:`SettingError`
    (a variable of the environment must never stop the task with a traceback)."""
    try:
        return PARSERS[name](name, raw)
    except SettingError:
        raise
    except Exception as exc:  # a parser's surprise is still a bad value
        raise SettingError(name, raw, f"cannot be read ({type(exc).__name__}: {exc})") from None


def grouped(values: Mapping[str, Any]) -> Settings:
    """Settings from flat, checked ``values`` (by setting name), each put in its group."""
    groups: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
    task: dict[str, Any] = {}
    for name, value in values.items():
        group = GROUP_OF.get(name)
        (task if group is None else groups[group])[name] = value
    built = {group: GROUPS[group](**given) for group, given in groups.items()}
    return Settings(**task, **built, names=tuple(values))


def _checked_argument(name: str, value: object, overridden: bool) -> Any:
    """The decorator's ``value``, checked even when ``PODCODE_<NAME>`` overrides it."""
    try:
        return PARSERS[name](name, value)
    except SettingError as exc:
        if not overridden:
            raise
        raise SettingError(
            name, value, f"{exc.reason} (the decorator's argument is checked even though "
            f"{env_name(name)} overrides it)"
        ) from None


def is_enabled(environ: Environ | None = None) -> bool:
    """Active when PODCODE_ENABLE=1, or inside Kubernetes unless PODCODE_ENABLE=0. A bad
    PODCODE_ENABLE raises :class:`SettingError`; the decorator asks
    :func:`interactive.base.activation.activation`, which never raises."""
    environ = os.environ if environ is None else environ
    flag = environ.get("PODCODE_ENABLE")
    if flag is not None and flag.strip() != "":
        return parse_bool("enable", flag)
    return bool(environ.get("KUBERNETES_SERVICE_HOST"))


def podcode_home(environ: Environ | None = None) -> Path:
    """``$PODCODE_HOME`` (default ``~/.podcode``): session file, inputs, IDE state."""
    environ = os.environ if environ is None else environ
    raw = environ.get("PODCODE_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".podcode"


def ensure_home(home: Path, inner: Path | None = None) -> Path:
    """Create ``home`` with mode 0700, or tighten it to 0700 when it already exists with
    more (it holds secrets); then create ``inner`` (a folder in it, such as a rank's)
    with mode 0700. Returns ``inner`` or ``home``. A home that is not ours to change
    is left as it is, with a warning."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = home.stat().st_mode & 0o777
    if mode & 0o077:
        try:
            home.chmod(0o700)
            log.info("PODCODE_HOME %s was mode %03o; tightened to 0700", home, mode)
        except OSError as exc:
            log.warning("PODCODE_HOME %s is mode %03o and cannot be tightened to 0700 (%s); "
                        "session files are still 0600", home, mode, exc)
    if inner is None:
        return home
    inner.mkdir(parents=True, exist_ok=True, mode=0o700)
    return inner


def workspace_for(ref: TaskRef, settings: Settings) -> Path:
    """The folder the IDE opens: ``workspace``, else the task's source folder."""
    if settings.workspace is not None:
        return settings.workspace
    if ref.source:
        return Path(ref.source).resolve().parent
    return Path.cwd()
