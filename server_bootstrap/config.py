"""Where code-server comes from: settings read from ``PODCODE_CODE_SERVER_*``."""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from server_bootstrap.builtins import GIT, SKIPPED, parse_skipped
from server_bootstrap.errors import ConfigError

DEFAULT_VERSION = "4.139.1"
METHODS = ("auto", "tarball", "npm")
RELEASE_URL = (
    "https://github.com/coder/code-server/releases/download/"
    "v{version}/code-server-{version}-linux-{arch}.tar.gz"
)
"""The upstream release tarball; ``PODCODE_CODE_SERVER_URL`` points elsewhere (a mirror)."""

_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+-]*$")


def machine_arch(machine: str | None = None) -> str:
    """code-server's name for this machine's architecture (``amd64``, ``arm64``)."""
    raw = (machine or platform.machine()).lower()
    return _ARCHES.get(raw, raw)


def default_cache(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/podcode/code-server``, else ``~/.cache/podcode/code-server``."""
    xdg = environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path(environ.get("HOME") or Path.home()) / ".cache"
    return base / "podcode" / "code-server"


@dataclass(frozen=True)
class CodeServerConfig:
    """How to find or install code-server. Every field has a ``PODCODE_CODE_SERVER_*`` twin."""

    path: Path | None = None
    """PODCODE_CODE_SERVER_PATH: an explicit code-server binary; wins over everything."""
    cache: Path = field(default_factory=lambda: default_cache(os.environ))
    """PODCODE_CODE_SERVER_CACHE: shared install folder (one sub-folder per version)."""
    version: str = DEFAULT_VERSION
    """PODCODE_CODE_SERVER_VERSION: the version installed when none is found."""
    tarball_url: str | None = None
    """PODCODE_CODE_SERVER_URL: release tarball URL (``{version}``, ``{arch}`` filled in)."""
    sha256: str | None = None
    """PODCODE_CODE_SERVER_SHA256: the tarball's sha256; required for tarball installs."""
    method: str = "auto"
    """PODCODE_CODE_SERVER_METHOD: ``auto`` (tarball when a URL or sha256 is set, else npm),
    ``tarball`` or ``npm``."""
    skip_builtins: frozenset[str] = SKIPPED
    """PODCODE_CODE_SERVER_SKIP_BUILTINS: code-server's built-in extensions (folder names,
    comma-separated) a session does not load; ``none``: load them all; ``default`` in the
    list stands for the defaults, ``-name`` keeps ``name``
    (:func:`~server_bootstrap.builtins.parse_skipped`)."""
    skip_outside_git: frozenset[str] = GIT
    """The built-ins a session does not load either when its workspace is not in a Git work
    tree (Git's, by default; from the same setting)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> CodeServerConfig:
        """Read the settings from ``environ`` (default: the process environment)."""
        env = os.environ if environ is None else environ
        skipped, outside_git = parse_skipped(env.get("PODCODE_CODE_SERVER_SKIP_BUILTINS"))
        return cls(
            path=_path(env, "PODCODE_CODE_SERVER_PATH"),
            cache=_path(env, "PODCODE_CODE_SERVER_CACHE") or default_cache(env),
            version=_version(env.get("PODCODE_CODE_SERVER_VERSION") or DEFAULT_VERSION),
            tarball_url=env.get("PODCODE_CODE_SERVER_URL") or None,
            sha256=_sha256(env.get("PODCODE_CODE_SERVER_SHA256") or None),
            method=_method(env.get("PODCODE_CODE_SERVER_METHOD") or "auto"),
            skip_builtins=skipped,
            skip_outside_git=outside_git,
        )

    def resolved_method(self) -> str:
        """``tarball`` or ``npm``: what ``auto`` means for these settings."""
        if self.method != "auto":
            return self.method
        return "tarball" if self.tarball_url or self.sha256 else "npm"

    def url_for(self, version: str | None = None, arch: str | None = None) -> str:
        """The tarball URL with ``{version}`` and ``{arch}`` filled in."""
        template = self.tarball_url or RELEASE_URL
        return template.replace("{version}", version or self.version).replace(
            "{arch}", arch or machine_arch()
        )


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    return Path(raw).expanduser() if raw else None


def _version(value: str) -> str:
    value = value.strip().removeprefix("v")
    if not _VERSION.match(value):
        raise ConfigError("PODCODE_CODE_SERVER_VERSION", value, "expected a version like 4.139.1")
    return value


def _sha256(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise ConfigError("PODCODE_CODE_SERVER_SHA256", value, "expected 64 hexadecimal digits")
    return value


def _method(value: str) -> str:
    value = value.strip().lower()
    if value not in METHODS:
        expected = f"expected one of {', '.join(METHODS)}"
        raise ConfigError("PODCODE_CODE_SERVER_METHOD", value, expected)
    return value
