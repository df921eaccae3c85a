"""code-server: its data folder, command line and environment, and when it is ready.

It is started, restarted and stopped as a :class:`~server_bootstrap.supervised.SupervisedServer`
(in a process group of its own; ready once it says where it listens and ``/healthz``
answers; restarted when it exits; its whole tree stopped).

The password reaches code-server as its SHA-256 (``hashed-password``) in a
``0600`` config file that exists only while code-server starts: never on its
command line, in its environment (which ``/proc/<pid>/environ`` shows for the
life of every process it starts) or in a log.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from server_bootstrap.builtins import GIT, SKIPPED, builtin_folder, product_root, skipped_for
from server_bootstrap.environ import without_secrets
from server_bootstrap.errors import CodeServerStartError
from server_bootstrap.extensions import install_companion, install_extensions
from server_bootstrap.probe import http_status as http_status
from server_bootstrap.probe import url_host as url_host
from server_bootstrap.supervised import MARKER_VARIABLE as MARKER_VARIABLE
from server_bootstrap.supervised import Launch, SupervisedServer

log = logging.getLogger(__name__)

_LISTENING = re.compile(r"HTTP server listening on (https?)://(\S+?):(\d+)/?")
START_TIMEOUT = 30.0
"""How long a start of code-server may take, from the spawn to ``/healthz`` answering."""
WARM_TIMEOUT = 60.0
"""How long the warm-up request (:meth:`CodeServer._warm`) waits for code-server's answer."""
_EMPTY: Mapping[str, str] = MappingProxyType({})
LOGIN_HINT = (
    'The password of this podcode session: "podcode attach" prints it, and it is the '
    '"password" field of the session\'s session.json under $PODCODE_HOME.'
)
"""What code-server's login page says about the password (with code-servers that take
``--i18n``); its own hint would point at the config file, which holds only a hash."""
_I18N_OPTION = re.compile(rb"\bi18n: \{")

USER_SETTINGS: Mapping[str, object] = MappingProxyType({
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoUpdate": "off",
    "extensions.autoCheckUpdates": False,
    "workbench.enableExperiments": False,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "chat.disableAIFeatures": True,
    "remote.autoForwardPorts": False,
    "remote.autoForwardPortsSource": "output",
})
"""Defaults for the session's VS Code user settings: no telemetry, no update checks, no
welcome page, no chat panel taking the focus, and no automatic port forwarding nor the
process scan behind it (to find ports to offer, the extension host runs
``ls -l /proc/*/fd/*`` and ``ps`` every few seconds, over a CPU-second a minute while the
session waits; code-server's port proxy keeps it scanning unless the source is "output").
A user's own values are kept."""


def data_folder(environ: Mapping[str, str]) -> Path:
    """code-server's own data folder for an environment: its heartbeat file (touched while
    any browser tab is open) and its logs (``coder-logs``) go there, whatever
    ``--user-data-dir`` says: ``$XDG_DATA_HOME/code-server``, else
    ``~/.local/share/code-server``."""
    base = environ.get("XDG_DATA_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "code-server"


def command_line(
    binary: Path,
    *,
    workspace: Path,
    bind: str,
    port: int,
    data_dir: Path,
    auth: str,
    config: Path | None = None,
    login_strings: Path | None = None,
    builtins: Path | None = None,
) -> list[str]:
    """code-server's argument list (the password is not in it: it is in ``config``);
    ``builtins``: its built-in extensions (:mod:`server_bootstrap.builtins`)."""
    return [
        str(binary),
        "--config", str(config or data_dir / "config.yaml"),
        "--bind-addr", f"{bind}:{port}",
        "--auth", auth,
        "--user-data-dir", str(data_dir / "user-data"),
        "--extensions-dir", str(data_dir / "extensions"),
        *(["--i18n", str(login_strings)] if login_strings is not None else []),
        *(["--builtin-extensions-dir", str(builtins)] if builtins is not None else []),
        "--disable-telemetry",
        "--disable-update-check",
        "--disable-workspace-trust",
        "--disable-getting-started-override",
        "--ignore-last-opened",
        str(workspace),
    ]


SKIP_SHELL_ENVIRONMENT = {"VSCODE_CLI": "1"}
"""Without it, VS Code's server runs the user's shell as a login shell (``bash -i -l -c``,
their ``.bashrc`` included) before it starts the extension host, and gives its terminals,
tasks and extensions the environment that shell printed: about 0.7 s on the way to the
failed frame, and an environment that is not the task's (a profile may reset ``PATH``
away from the task's interpreter). ``VSCODE_CLI=1`` is what VS Code reads as "started
from a shell already" and skips that step for; it changes nothing else in code-server."""


def child_environ(base: Mapping[str, str], extra: Mapping[str, str], marker: str) -> dict[str, str]:
    """code-server's environment: ``base`` (the task's) + ``extra`` without any password,
    plus the tree marker, and taken as it is rather than re-read from a login shell."""
    env = without_secrets({**base, **extra, **SKIP_SHELL_ENVIRONMENT})
    env[MARKER_VARIABLE] = marker
    return env


def config_text(password: str | None) -> str:
    """The config file: the password's SHA-256 as ``hashed-password`` (code-server's legacy
    hash, which it recognises by the absence of ``$argon``), or nothing without one."""
    if password is None:
        return "{}\n"
    digest = hashlib.sha256(password.encode()).hexdigest()
    return f'hashed-password: "{digest}"\n'  # quoted: a hex string may read as a number


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte (replaced atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def takes_login_strings(binary: Path) -> bool:
    """Whether this code-server has the ``--i18n`` option (custom login-page strings),
    read from its CLI module; False when it cannot be found."""
    root = product_root(binary)
    try:
        text = (root / "out" / "node" / "cli.js").read_bytes() if root else b""
    except OSError:
        return False
    return bool(_I18N_OPTION.search(text))


def write_user_settings(path: Path, defaults: Mapping[str, object] = USER_SETTINGS) -> None:
    """Add ``defaults`` missing from the user settings file ``path`` (left alone when it
    is not plain JSON, e.g. has comments)."""
    try:
        current = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        log.info("leaving %s alone: it is not plain JSON", path)
        return
    if not isinstance(current, dict):
        return
    merged = {**defaults, **current}
    if merged != current or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merged, indent=2) + "\n")


class CodeServer(SupervisedServer):
    """One code-server process tree serving ``workspace`` on ``bind:port``."""

    name = "code-server"
    error = CodeServerStartError

    def __init__(
        self,
        binary: Path,
        *,
        workspace: Path,
        bind: str,
        port: int,
        data_dir: Path,
        password: str | None,
        env: Mapping[str, str] = _EMPTY,
        extensions: Sequence[str | Path] = (),
        companion: bool = False,
        max_restarts: int = 3,
        restart_delay: float = 1.0,
        stop_grace: float = 5.0,
        marker: str | None = None,
        skip_builtins: frozenset[str] = SKIPPED,
        skip_outside_git: frozenset[str] = GIT,
    ) -> None:
        super().__init__(marker=marker or secrets.token_hex(8), max_restarts=max_restarts,
                         restart_delay=restart_delay, stop_grace=stop_grace,
                         start_timeout=START_TIMEOUT)
        self.binary = binary
        self.skip_builtins = skip_builtins
        """code-server's built-in extensions this session does not load."""
        self.skip_outside_git = skip_outside_git
        """... nor these, when the workspace is not in a Git work tree."""
        self.workspace = workspace
        self.bind = bind
        self.port = port
        self.data_dir = data_dir
        self.extensions = tuple(extensions)
        self.companion = companion
        self._password = password
        self._env = dict(env)
        self._config = data_dir / f"config-{self._marker}.yaml"
        """Holds the password's hash while code-server starts; removed once it listens."""
        self._login_strings: Path | None = None
        self._builtins: Path | None = None
        self._listening: asyncio.Future[int] | None = None
        self._warming: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"CodeServer(url={self.url!r}, pid={self.pid}, workspace={str(self.workspace)!r})"

    @property
    def auth(self) -> str:
        return "none" if self._password is None else "password"

    def _prepare(self) -> None:
        """The data folder, the login page's strings, the user settings, the built-in
        extensions this session loads and the extensions to install."""
        for folder in (self.data_dir, self.data_dir / "user-data", self.data_dir / "extensions"):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self._password is not None and takes_login_strings(self.binary):
            self._login_strings = self.data_dir / "login-strings.json"
            write_private(self._login_strings, json.dumps({"LOGIN_PASSWORD": LOGIN_HINT}))
        write_user_settings(self.data_dir / "user-data" / "User" / "settings.json")
        skipped = skipped_for(_folder(self.workspace), self.skip_builtins, self.skip_outside_git)
        self._builtins = builtin_folder(self.binary, self.data_dir / "builtin-extensions",
                                        skipped)
        if self.companion:
            install_companion(self.data_dir / "extensions")
        if self.extensions:
            install_extensions(self.binary, self.data_dir / "extensions", self.extensions)

    async def _command(self) -> Launch:
        args = command_line(self.binary, workspace=self.workspace, bind=self.bind,
                            port=self.port, data_dir=self.data_dir, auth=self.auth,
                            config=self._config, login_strings=self._login_strings,
                            builtins=self._builtins)
        env = child_environ(os.environ, self._env, self._marker)
        # code-server reads its config once, in its launcher, which hands the settings to
        # the server it forks (and to any relaunch): the file is needed only until it listens.
        await asyncio.to_thread(write_private, self._config, config_text(self._password))
        self._listening = asyncio.get_running_loop().create_future()
        return Launch(args, env, _folder(self.workspace), secret=self._config)

    def _heard(self, line: str) -> None:
        match = _LISTENING.search(line)
        if match and self._listening is not None and not self._listening.done():
            self._listening.set_result(int(match.group(3)))

    async def _until_ready(self, proc: asyncio.subprocess.Process, deadline: float) -> None:
        port = await self._wait_listening(proc, deadline)
        self._config.unlink(missing_ok=True)
        self.port = port  # a restart keeps the same address
        self.url = f"http://{url_host(self.bind)}:{port}/"
        await self._wait_answering("/healthz", deadline, poll=0.02)

    async def _served(self) -> None:
        self._warming = asyncio.create_task(self._warm(self.url))

    def _stopped(self) -> None:
        if self._warming is not None:
            self._warming.cancel()

    def _described(self) -> str:
        return f"code-server ({self.binary})"

    @staticmethod
    async def _warm(url: str) -> None:
        """Have code-server load its VS Code server now, not at the first page a browser
        asks for: code-server loads it on the first request for ``/``, signed in or not
        (this one, without a cookie, is answered with the login page's address). It takes
        0.6 to 0.8 s of the first page's time on two cores, and a person is still on the
        way to the link meanwhile."""
        status = await http_status(url, "/", timeout=WARM_TIMEOUT)
        log.debug("code-server loaded its VS Code server (GET / answered %s)", status)

    async def _wait_listening(self, proc: asyncio.subprocess.Process, deadline: float) -> int:
        assert self._listening is not None
        exited = asyncio.ensure_future(proc.wait())
        try:
            done, _ = await asyncio.wait(
                {self._listening, exited}, timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            exited.cancel()
        if self._listening.done():
            return self._listening.result()
        if exited in done:
            raise CodeServerStartError(self._failure(f"exited with {proc.returncode}"))
        raise CodeServerStartError(self._failure("did not start listening in time"))


def _folder(workspace: Path) -> Path:
    """code-server's working folder: the workspace, or the folder of a ``.code-workspace``."""
    return workspace if workspace.is_dir() else workspace.parent
