"""Find code-server: the explicit setting, then PATH, then the shared cache; else install."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from server_bootstrap.cancel import Cancel
from server_bootstrap.config import CodeServerConfig
from server_bootstrap.errors import CodeServerNotFound, InstallError
from server_bootstrap.installs import installed

log = logging.getLogger(__name__)

WAYS = """Ways to provide code-server:
  - put it in the image, on PATH (a release tarball, or `npm install -g code-server`);
  - point PODCODE_CODE_SERVER_PATH at a code-server binary;
  - fill the shared cache ahead of time: `podcode install` (PODCODE_CODE_SERVER_CACHE={cache});
  - let podcode install it: from a release tarball mirror (PODCODE_CODE_SERVER_URL and
    PODCODE_CODE_SERVER_SHA256) or from the npm registry (needs network access and npm)."""


def find_code_server(
    config: CodeServerConfig, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The first of: ``config.path``, ``code-server`` on PATH, the cache's install of
    ``config.version``. An explicit path that is not an executable is an error."""
    if config.path is not None:
        if not (config.path.is_file() and os.access(config.path, os.X_OK)):
            raise CodeServerNotFound(
                f"PODCODE_CODE_SERVER_PATH={str(config.path)!r} is not an executable file: "
                "fix or unset it"
            )
        return config.path
    env = os.environ if environ is None else environ
    on_path = shutil.which("code-server", path=env.get("PATH"))
    if on_path:
        return Path(on_path)
    return installed(config.cache, config.version)


def ensure_code_server(
    config: CodeServerConfig, *, install: bool = True, environ: Mapping[str, str] | None = None,
    cancel: Cancel | None = None,
) -> Path:
    """:func:`find_code_server`, else install into the cache (when ``install``; ``cancel``
    stops the install)."""
    found = find_code_server(config, environ)
    if found is not None:
        log.debug("using code-server at %s", found)
        return found
    if not install:
        raise CodeServerNotFound(
            "code-server is not installed and installing is off.\n"
            + WAYS.format(cache=config.cache)
        )
    try:
        from server_bootstrap import install as installer  # only when needed

        return installer.install(config, environ=environ, cancel=cancel)
    except InstallError as exc:
        raise CodeServerNotFound(
            f"code-server is not installed, and installing it failed: {exc}\n"
            + WAYS.format(cache=config.cache)
        ) from exc


def version_of(binary: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """code-server's version (``4.139.1``) from ``--version --json``, or None when it does
    not run. Only the JSON line counts: a first run in a new home prints "Wrote default
    config file ..." before it."""
    try:
        done = subprocess.run([str(binary), "--version", "--json"], capture_output=True,
                              text=True, timeout=60, check=False,
                              env=None if environ is None else dict(environ))
    except (OSError, subprocess.SubprocessError):
        return None
    for line in reversed(done.stdout.splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and isinstance(answer.get("codeServer"), str):
            return str(answer["codeServer"])
    return None
