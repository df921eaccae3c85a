"""The shared install folder: one sub-folder per version, built aside then renamed.

Many pods (and CI runs) may share one cache volume. An install holds an
exclusive file lock for its version while it builds in a temporary sibling
folder and renames it into place, so no reader ever sees half an install.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from server_bootstrap.config import machine_arch

log = logging.getLogger(__name__)

MARKER = ".podcode-install.json"
"""Written last into a complete install; a folder without it is ignored."""


def install_name(version: str, arch: str | None = None) -> str:
    return f"{version}-linux-{arch or machine_arch()}"


def binary_in(install_dir: Path) -> Path:
    return install_dir / "bin" / "code-server"


def installed(cache: Path, version: str) -> Path | None:
    """The binary of a complete install of ``version`` in ``cache``, else None."""
    folder = cache.expanduser() / install_name(version)
    binary = binary_in(folder)
    if (folder / MARKER).is_file() and os.access(binary, os.X_OK):
        return binary
    return None


@contextlib.contextmanager
def locked(cache: Path, name: str) -> Iterator[None]:
    """Hold the exclusive lock of install ``name`` in ``cache`` (waits for other holders)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".{name}.lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another process is installing %s into %s; waiting for it", name, cache)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


Builder = Callable[[Path], Path]
"""Fills a fresh staging folder; returns the folder (it or one inside it) to install."""


def atomic_install(cache: Path, name: str, build: Builder, info: dict[str, Any]) -> Path:
    """Install folder ``cache/name`` built by ``build``, unless a complete one is there."""
    cache = cache.expanduser()
    final = cache / name
    with locked(cache, name):
        if (final / MARKER).is_file():
            log.info("code-server %s is already installed in %s", name, cache)
            return final
        _remove_stale(cache, name)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=cache))
        try:
            ready = build(staging)
            info = {**info, "installed_at": time.time()}
            (ready / MARKER).write_text(json.dumps(info, indent=2) + "\n")
            ready.chmod(0o755)  # the staging folder is private; the install is shared
            if final.exists():
                shutil.rmtree(final)
            ready.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log.info("installed code-server into %s", final)
    return final


def _remove_stale(cache: Path, name: str) -> None:
    """Staging folders of crashed installs: only the lock holder builds, so they are dead."""
    for stale in cache.glob(f".tmp-{name}-*"):
        log.info("removing an interrupted install: %s", stale)
        shutil.rmtree(stale, ignore_errors=True)
