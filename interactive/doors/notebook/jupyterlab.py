"""JupyterLab as the session's IDE (``ide="jupyter"``, the ``jupyter`` extra).

JupyterLab is served like code-server: on ``bind:port``, behind the session's password
(Jupyter's token; typed at JupyterLab's own login page), opening the starter notebook.
Its one kernel, ``podcode``, is :mod:`.bridge`: every cell runs in the failed frame of
the task's process, through the control API's ``/api/notebook/*`` routes, as the VS Code
companion's cells do. Nothing of the user's Jupyter set-up is read or changed: the
server's configuration and data folders are the session's own (``0700``, in the podcode
home), and its kernel talks to it over Unix sockets in a ``0700`` temporary folder. The
server's environment is the task's without any variable that points Jupyter or IPython at
a folder of the user's (:func:`isolated_environ`): their configuration files, extensions,
kernel specs and startup files are not read. What jupyter_core always reads is the
image's own: the configuration under ``sys.prefix`` (``etc/jupyter``: it enables the
installed server extensions, JupyterLab's among them) and the system-wide folders
(``/usr/local/etc/jupyter``, ``/etc/jupyter``), and the extensions installed under
``sys.prefix/share/jupyter``.

The token is in a ``0600`` configuration file there while the server starts, never in
its command line nor its environment (that its terminals and kernels inherit). The
file is removed once the server answers, and so are the two files the server writes
into its runtime folder as it starts, which hold the token too: ``jpserver-<pid>.json``
(``0600``, read only by ``jupyter server list`` and ``stop``) and
``jpserver-<pid>-open.html`` (the page ``--no-browser`` still writes; jupyter_server's
``no_browser_open_file`` cannot be set from the command line); its
``jupyter_cookie_secret`` (the key that signs login cookies) is removed too. From then on,
the token is only in the server's memory and the session's records.

It is started, restarted and stopped as code-server is, as a
:class:`~server_bootstrap.supervised.SupervisedServer`: in a process group of its own,
ready once ``/api`` answers; when it exits while the session waits it is started again on
the same port (:data:`MAX_RESTARTS` times at most: then the session says its IDE is down,
and the debugger and the control API still serve); stopped with its whole tree, kernels
and terminals included.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from server_bootstrap.codeserver import child_environ, write_private
from server_bootstrap.errors import ServerStartError
from server_bootstrap.probe import url_host
from server_bootstrap.supervised import Launch, SupervisedServer

KERNEL_NAME = "podcode"
"""The kernel spec's name: the starter notebook's ``kernelspec`` names it."""
START_TIMEOUT_SECONDS = 60.0
"""How long a start of the server may take, from the spawn to ``/api`` answering."""
STOP_GRACE_SECONDS = 0.1
"""At stop, how long the server and its kernels get after SIGTERM before SIGKILL: nothing
of theirs needs a graceful shutdown (the notebook is saved by the browser as the user
works; the kernel is a bridge that holds no state)."""
FOREIGN_PREFIXES = ("JUPYTER", "IPYTHON")
"""Variables of the task's environment not passed to the server: every ``JUPYTER*``
(``JUPYTER_CONFIG_PATH``, ``JUPYTER_PATH``, ``JUPYTER_TOKEN``, ``JUPYTERLAB_DIR``...)
and ``IPYTHON*`` one; the session's own are set instead."""
FOREIGN_NAMES = ("XDG_CONFIG_DIRS", "XDG_DATA_DIRS")
"""Read by jupyter_core (through platformdirs) as more configuration and data folders."""
MAX_RESTARTS, RESTART_DELAY_SECONDS = 3, 1.0
"""A server that exits is started again this many times at most (a start that fails
counting as one), after this pause (as code-server is)."""
QUIET_LAB = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                    "checkForUpdates": False},
}
"""JupyterLab's user settings for the session: no news feed and no update check (a pod
is often offline, and the question would cover the notebook)."""
MISSING = ("ide=\"jupyter\" needs JupyterLab in the task's environment: pip install "
           "'podcode[jupyter]' (or jupyterlab) into the image")


class JupyterUnavailable(ServerStartError):
    """JupyterLab cannot be imported by the task's interpreter."""


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("jupyterlab") is not None


def kernel_spec(session_file: Path, label: str) -> dict[str, object]:
    """The ``podcode`` kernel: the bridge, told where the session's endpoint file is
    (not a secret; the file is ``0600``). Interrupts come as messages, which the bridge
    forwards to the session."""
    return {
        "argv": [sys.executable, "-m", "interactive.doors.notebook.bridge",
                 "--session-file", str(session_file), "-f", "{connection_file}"],
        "display_name": label,
        "language": "python",
        "interrupt_mode": "message",
    }


def command_line(*, root: Path, bind: str, port: int, opens: str) -> list[str]:
    """The server's argument list (no secret in it): ``opens`` is the path, relative to
    ``root``, JupyterLab shows first."""
    return [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        f"--ServerApp.ip={bind}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        "--ContentsManager.allow_hidden=True",  # the notebook is under .vscode/podcode
        "--KernelManager.transport=ipc",  # the kernel's sockets in a private folder
        f"--LabApp.default_url=/lab/tree/{opens}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        *(["--allow-root"] if os.geteuid() == 0 else []),  # many images run as root
    ]


def rank_kernels(task: str, ranks: Mapping[int, Path]) -> dict[str, dict[str, object]]:
    """A kernel for each other local rank of a distributed task (``ranks``: each one's
    session record, which holds its control URL and token): its cells run in that rank's
    failed frame, once it waits in a session."""
    from interactive.doors.notebook.starter import label

    return {f"{KERNEL_NAME}-rank-{local}": kernel_spec(record, label(task, local))
            for local, record in sorted(ranks.items())}


def prepare(folder: Path, runtime: Path, *, password: str | None,
            kernels: Mapping[str, Mapping[str, object]]) -> dict[str, str]:
    """Write the server's private folders, its configuration (the token) and the kernel
    specs (by name); the environment variables that point JupyterLab at them.
    ``runtime``: where the kernels' sockets go (a short path: a socket's path has at most
    107 bytes)."""
    config, data = folder / "config", folder / "data"
    for path in (folder, config, data):
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_private(config / "jupyter_server_config.json",
                  json.dumps({"IdentityProvider": {"token": password or ""}}))
    for name, spec in kernels.items():  # its folder made 0700 by write_private
        write_private(data / "kernels" / name / "kernel.json", json.dumps(spec))
    settings = folder / "lab-settings"
    for plugin, values in QUIET_LAB.items():
        package, name = plugin.split(":")
        write_private(settings / package / f"{name}.jupyterlab-settings", json.dumps(values))
    return {"JUPYTER_CONFIG_DIR": str(config), "JUPYTER_DATA_DIR": str(data),
            "JUPYTER_RUNTIME_DIR": str(runtime), "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(folder / "lab-workspaces"),
            "JUPYTER_PLATFORM_DIRS": "1", "IPYTHONDIR": str(folder / "ipython")}


def isolated_environ(task: Mapping[str, str], own: Mapping[str, str],
                     user_site: bool) -> dict[str, str]:
    """The server's environment: ``task``'s without what would point Jupyter or IPython
    at the user's folders, then ``own`` (the session's folders). ``user_site``: JupyterLab
    itself is installed in the user's site-packages, which must stay readable; otherwise
    the user site is left out (jupyter_core reads ``~/.local/etc/jupyter`` through it)."""
    env = {name: value for name, value in task.items()
           if not name.startswith(FOREIGN_PREFIXES) and name not in FOREIGN_NAMES}
    if not user_site:
        env["PYTHONNOUSERSITE"] = "1"
    return {**env, **own}


def installed_in_user_site() -> bool:
    """Whether JupyterLab is imported from the user's site-packages (``pip --user``)."""
    import importlib.util
    import site

    spec = importlib.util.find_spec("jupyterlab")
    origin = spec.origin if spec is not None else None
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    return bool(origin and user and Path(origin).resolve().is_relative_to(Path(user).resolve()))


def remove_secret_files(runtime: Path) -> list[Path]:
    """Remove what the server wrote into ``runtime`` as it started that holds a secret:
    ``jpserver-*.json`` and ``jpserver-*-open.html`` (the token) and
    ``jupyter_cookie_secret`` (the key that signs its login cookies). It has read them
    into memory; nothing the session uses reads them again."""
    removed = []
    for path in [*runtime.glob("jpserver-*.json"), *runtime.glob("jpserver-*.html"),
                 runtime / "jupyter_cookie_secret"]:
        if path.exists():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class JupyterLab(SupervisedServer):
    """One JupyterLab server serving ``root`` on ``bind:port`` for a session."""

    name = "JupyterLab"
    launcher_pid = False
    """:attr:`pid` is always None: the idle monitor leaves out of the activity the processes
    of an IDE's tree that run its launcher's executable (code-server's node), but
    JupyterLab's kernels and terminals run the user's work on the same Python as the
    server. So all of JupyterLab's tree counts; the server itself, with a browser tab open,
    and the bridge kernel use next to no CPU."""

    def __init__(self, *, root: Path, notebook: Path, folder: Path, bind: str, port: int,
                 password: str | None, kernels: Mapping[str, Mapping[str, object]],
                 marker: str) -> None:
        super().__init__(marker=marker, max_restarts=MAX_RESTARTS,
                         restart_delay=RESTART_DELAY_SECONDS, stop_grace=STOP_GRACE_SECONDS,
                         start_timeout=START_TIMEOUT_SECONDS)
        self.root, self.notebook, self.folder = root, notebook, folder
        self.bind, self.port = bind, port
        self.kernels = kernels
        """The kernel specs by name: :data:`KERNEL_NAME` (this session's) first."""
        self._password = password
        self._runtime: Path | None = None
        """The kernels' sockets and the server's runtime files: a new folder at each start,
        removed when the server stops."""
        self._user_site = False

    def _prepare(self) -> None:
        if not available():
            raise JupyterUnavailable(MISSING)
        self._user_site = installed_in_user_site()

    async def _command(self) -> Launch:
        self._runtime = Path(tempfile.mkdtemp(prefix="podcode-jupyter-"))  # 0700
        extra = await asyncio.to_thread(prepare, self.folder, self._runtime,
                                        password=self._password, kernels=self.kernels)
        env = isolated_environ(child_environ(os.environ, {}, self._marker), extra,
                               self._user_site)
        opens = self.notebook.relative_to(self.root).as_posix()
        self.url = f"http://{url_host(self.bind)}:{self.port}/"
        return Launch(command_line(root=self.root, bind=self.bind, port=self.port, opens=opens),
                      env, self.root,
                      secret=self.folder / "config" / "jupyter_server_config.json")

    async def _until_ready(self, proc: asyncio.subprocess.Process, deadline: float) -> None:
        await self._wait_answering("/api", deadline, poll=0.05)

    async def _served(self) -> None:
        if self._runtime is not None:  # written before it serves
            await asyncio.to_thread(remove_secret_files, self._runtime)

    def _stopped(self) -> None:
        if self._runtime is not None:
            shutil.rmtree(self._runtime, ignore_errors=True)
