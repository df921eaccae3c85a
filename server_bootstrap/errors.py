"""Errors of the code-server bootstrap: each says what was wrong and what to do."""

from __future__ import annotations


class BootstrapError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(BootstrapError, ValueError):
    """A ``PODCODE_CODE_SERVER_*`` variable has a bad value."""

    def __init__(self, name: str, value: str, reason: str) -> None:
        super().__init__(f"{name}={value!r}: {reason}")
        self.name = name
        self.value = value


class CodeServerNotFound(BootstrapError):
    """code-server is neither given, on PATH, in the cache, nor installable."""


class InstallError(BootstrapError):
    """An install of code-server (tarball or npm) failed."""


class ChecksumMismatch(InstallError):
    """A download's sha256 differs from the expected one."""


class UnsafeArchive(InstallError):
    """An archive holds a path or link that would land outside its target."""


class ServerStartError(BootstrapError):
    """A supervised server (code-server, JupyterLab) did not become ready, or exited more
    often than it may be restarted."""


class CodeServerStartError(ServerStartError):
    """code-server did not become ready, or crashed more often than allowed."""


class ExtensionError(BootstrapError):
    """An extension could not be packed, fetched or installed."""
