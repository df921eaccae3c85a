"""The session's SSH endpoint: desktop editors (VS Code Remote-SSH, JetBrains Gateway),
``ssh``, ``sftp``, ``scp`` and ``rsync`` into the waiting task's workspace.

Served by asyncssh on the session's loop, on the session's bind address (loopback by
default: reached through the Kubernetes port-forward, like the other listeners):

- keys only: a host key made for this session (its public half pinned in the session's
  record, so the client checks it with no prompt) and the user keys of
  ``ssh_authorized_keys`` or pushed by ``podcode`` over the authenticated control API;
  passwords and keyboard-interactive are refused; at most :data:`MAX_UNAUTHENTICATED`
  connections log in at once, each within :data:`LOGIN_GRACE_SECONDS`;
- shell and exec run as the task's user, in the workspace, with the task's environment
  (its Python first on ``PATH``, ``PODCODE_SESSION_ID`` so ``load_inputs()`` finds this
  session, no secret of podcode's);
- sftp, rooted at the workspace for relative paths;
- ``direct-tcpip`` (``ssh -L``, the editors' tunnels) to loopback ports only; no remote
  forwarding, agent or X11 forwarding.

Activity for the idle monitor (:class:`Activity`): a channel opening, what a person types
into a shell or a command, sftp writes, and forwarded traffic above a trickle (an editor
left open sends a heartbeat; that alone is not somebody working).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import struct
import sys
import termios
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from server_bootstrap.environ import without_secrets

log = logging.getLogger(__name__)

MAX_KEYS = 64
"""User keys one session accepts (from the setting and pushed together)."""
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
TRICKLE_BYTES = 2048
"""Forwarded bytes from the client per window that are still only an editor's heartbeat."""
WINDOW_SECONDS = 60.0
READ_BYTES = 65536
CLOSE_SECONDS = 5.0
"""How long a finished command's channel may take to deliver its output and status."""
MAX_UNAUTHENTICATED = 16
"""Connections still logging in at once; one beyond is told "too many connections" and
closed at once (OpenSSH's ``MaxStartups``). Each holds a file descriptor until it logs in
or its grace time ends: without a bound, a flood of connections that never log in
exhausts the task's descriptors (``ulimit -n``), which its own files and the control API's
``/healthz`` need too. A person logs in over one or two at a time; an editor a few more."""
LOGIN_GRACE_SECONDS = 30.0
"""How long a connection may take to log in before it is closed (OpenSSH's
``LoginGraceTime``): a key login takes well under a second, even through a port-forward."""
STOP_GRACE_SECONDS = 10.0
"""How long a closing session waits for the commands running over SSH (not the shells,
which never end by themselves): the ``podcode resume`` that ended it returns its status."""


class KeyError_(ValueError):
    """A public key that cannot be read (the message says which and why)."""


def parse_keys(text: str, where: str) -> list[asyncssh.SSHKey]:
    """The public keys of ``text`` in ``authorized_keys`` form (one per line, ``#``
    comments and blank lines skipped); a line that is not a key names ``where``."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            keys.append(asyncssh.import_public_key(line))
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise KeyError_(f"{where}, line {number}: not an OpenSSH public key ({exc}); "
                            "expected a line such as 'ssh-ed25519 AAAA... me@laptop' "
                            "(options before the key are not supported)") from None
    return keys


def authorized_keys_from(value: str | None) -> list[asyncssh.SSHKey]:
    """The keys of the ``ssh_authorized_keys`` setting: the keys themselves, or the path
    of a file holding them (a mounted Secret or ConfigMap)."""
    if not value:
        return []
    if value.lstrip().startswith(("ssh-", "ecdsa-", "sk-")):
        return parse_keys(value, "ssh_authorized_keys")
    path = Path(value).expanduser()
    try:
        text = path.read_text()
    except OSError as exc:
        raise KeyError_(f"ssh_authorized_keys: cannot read {path} ({exc.strerror or exc})") \
            from None
    return parse_keys(text, str(path))


def fingerprint(key: asyncssh.SSHKey) -> str:
    return str(key.get_fingerprint("sha256"))


@dataclass
class Activity:
    """Turns what happens on the endpoint into activity for the idle monitor: events
    count at once, forwarded bytes once a window holds more than a trickle."""

    touch: Callable[[], None]
    clock: Callable[[], float]
    trickle_bytes: int = TRICKLE_BYTES
    window_seconds: float = WINDOW_SECONDS
    _window_start: float = field(default=float("-inf"), init=False)
    _window_bytes: int = field(default=0, init=False)

    def event(self, what: str) -> None:
        log.debug("ssh activity: %s", what)
        self.touch()

    def forwarded(self, count: int) -> bool:
        """``count`` bytes came from the client over a tunnel; True when that made it
        activity."""
        now = self.clock()
        if now - self._window_start >= self.window_seconds:
            self._window_start, self._window_bytes = now, 0
        self._window_bytes += count
        if self._window_bytes > self.trickle_bytes:
            self.touch()
            return True
        return False


def task_environ(base: Mapping[str, str], session: str, python: str = sys.executable
                 ) -> dict[str, str]:
    """What an SSH user's commands run with: the task's environment without podcode's
    secrets, its Python's folder first on ``PATH``, and the session's id."""
    env = without_secrets(base)
    folder = str(Path(python).parent)
    path = [part for part in env.get("PATH", os.defpath).split(os.pathsep) if part != folder]
    env["PATH"] = os.pathsep.join([folder, *path])
    env["PODCODE_SESSION_ID"] = session
    return env


def shell_of(environ: Mapping[str, str]) -> str:
    shell = environ.get("SHELL") or ""
    return shell if shell and os.access(shell, os.X_OK) else "/bin/sh"


def command_line(shell: str, command: str | None, terminal: bool) -> list[str]:
    """What runs for an exec request (``command``) or a shell (None): not a login shell,
    whose profile would put the system's Python before the task's."""
    if command is not None:
        return [shell, "-c", command]
    return [shell, "-i"] if terminal else [shell]


def _set_size(fd: int, size: tuple[int, int, int, int]) -> None:
    columns, rows, width, height = size
    if columns and rows:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, width, height))


class _Sftp(asyncssh.SFTPServer):
    """sftp with relative paths in the workspace; writes count as activity."""

    def __init__(self, chan: Any, *, workspace: Path, activity: Activity) -> None:
        super().__init__(chan)
        self._workspace = os.fsencode(workspace)
        self._activity = activity
        activity.event("sftp")

    def map_path(self, path: bytes) -> bytes:
        return path if path.startswith(b"/") else os.path.join(self._workspace, path)

    def open(self, path: bytes, pflags: int, attrs: Any) -> Any:
        if pflags & (asyncssh.FXF_WRITE | asyncssh.FXF_APPEND | asyncssh.FXF_CREAT):
            self._activity.event("sftp open for writing")
        return super().open(path, pflags, attrs)

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        self._activity.event("sftp write")
        return super().write(file_obj, offset, data)

    def remove(self, path: bytes) -> Any:
        self._activity.event("sftp remove")
        return super().remove(path)

    def rename(self, oldpath: bytes, newpath: bytes) -> Any:
        self._activity.event("sftp rename")
        return super().rename(oldpath, newpath)

    def posix_rename(self, oldpath: bytes, newpath: bytes) -> Any:
        self._activity.event("sftp rename")
        return super().posix_rename(oldpath, newpath)

    def exit(self) -> None:
        """End the session with exit status 0, as OpenSSH's sftp-server does: ``scp`` (over
        sftp) takes a session that ends without one for a failure."""
        with contextlib.suppress(OSError, asyncssh.Error):
            self.channel.exit(0)


def _refuse(conn: asyncssh.SSHServerConnection) -> None:
    """Close a connection beyond :data:`MAX_UNAUTHENTICATED`, telling the client why."""
    with contextlib.suppress(OSError, asyncssh.Error):
        conn.disconnect(asyncssh.DISC_TOO_MANY_CONNECTIONS,
                        f"too many connections logging in at once (at most "
                        f"{MAX_UNAUTHENTICATED}): try again in a moment")


class _Server(asyncssh.SSHServer):
    """One connection: key authentication only, tunnels to loopback only."""

    def __init__(self, endpoint: SshEndpoint) -> None:
        self._endpoint = endpoint
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._endpoint.connections.add(conn)
        if not self._endpoint.admit(conn):
            asyncio.get_running_loop().call_soon(_refuse, conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._endpoint.connections.discard(self._conn)
            self._endpoint.logged_in(self._conn)

    def auth_completed(self) -> None:
        if self._conn is not None:
            self._endpoint.logged_in(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True  # always authenticate: there is no anonymous access

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        accepted = self._endpoint.accepts(key)
        if accepted:
            self._endpoint.activity.event(f"login with key {fingerprint(key)}")
        return accepted

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str,
                             orig_port: int) -> Any:
        if dest_host not in LOOPBACK:
            log.info("ssh: refused a tunnel to %s:%d (loopback only)", dest_host, dest_port)
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                f"tunnels reach this pod's loopback ports only, not {dest_host}",
            )
        self._endpoint.activity.event(f"tunnel to port {dest_port}")

        async def relay(reader: asyncssh.SSHReader[bytes],
                        writer: asyncssh.SSHWriter[bytes]) -> None:
            await self._endpoint.relay(dest_host, dest_port, reader, writer)

        return relay

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False  # no remote forwarding: nothing in the pod listens for the client

    def unix_connection_requested(self, dest_path: str) -> bool:
        return False

    def unix_server_requested(self, listen_path: str) -> bool:
        return False


class SshEndpoint:
    """Serves SSH on an already-bound, listening socket until :meth:`stop`."""

    def __init__(self, sock: socket.socket, *, workspace: Path, environ: Mapping[str, str],
                 activity: Activity, keys: Iterable[asyncssh.SSHKey] = ()) -> None:
        self._sock = sock
        self.workspace = workspace
        self.environ = dict(environ)
        self.activity = activity
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self._keys: dict[bytes, str] = {}
        for key in keys:
            self.authorize(key)
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self._logging_in: set[asyncssh.SSHServerConnection] = set()
        self._refusing = False
        self._children: set[asyncio.subprocess.Process] = set()
        self._running: set[asyncio.Task[Any]] = set()
        """The commands being served, shells aside (each until its exit status is sent)."""
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self.port = int(sock.getsockname()[1])
        self.host = str(sock.getsockname()[0])

    @property
    def host_public_key(self) -> str:
        """The host key as a ``known_hosts`` line's key part: ``ssh-ed25519 AAAA...``."""
        return self.host_key.export_public_key("openssh").decode().strip()

    def accepts(self, key: asyncssh.SSHKey) -> bool:
        return key.public_data in self._keys

    def authorize(self, key: asyncssh.SSHKey) -> str:
        """Accept ``key`` from now on; its fingerprint. At most :data:`MAX_KEYS`."""
        if key.public_data not in self._keys and len(self._keys) >= MAX_KEYS:
            raise KeyError_(f"this session already accepts {MAX_KEYS} keys")
        self._keys[key.public_data] = fingerprint(key)
        return self._keys[key.public_data]

    def admit(self, conn: asyncssh.SSHServerConnection) -> bool:
        """Whether a new connection may log in (at most :data:`MAX_UNAUTHENTICATED` at
        once); a refusal is logged once per flood."""
        if len(self._logging_in) >= MAX_UNAUTHENTICATED:
            if not self._refusing:
                log.warning("ssh: %d connections are logging in at once: refusing more until "
                            "they log in or their %g s grace ends", MAX_UNAUTHENTICATED,
                            LOGIN_GRACE_SECONDS)
            self._refusing = True
            return False
        self._logging_in.add(conn)
        return True

    def logged_in(self, conn: asyncssh.SSHServerConnection) -> None:
        """``conn`` logged in or closed: it no longer counts against the bound."""
        self._logging_in.discard(conn)
        if len(self._logging_in) < MAX_UNAUTHENTICATED // 2:
            self._refusing = False

    async def start(self) -> None:
        self._acceptor = await asyncssh.listen(
            sock=self._sock,
            server_factory=lambda: _Server(self),
            server_host_keys=[self.host_key],
            process_factory=self._run,
            sftp_factory=lambda chan: _Sftp(chan, workspace=self.workspace,
                                            activity=self.activity),
            allow_scp=True,
            encoding=None,
            line_editor=False,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_pty=True,
            login_timeout=LOGIN_GRACE_SECONDS,
            keepalive_interval=30,
            keepalive_count_max=4,
        )

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop listening; give running commands ``grace`` seconds to end (the
        ``podcode resume`` that ended the session returns its status; shells are not
        waited for), then close every connection and hang up on what they started."""
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        if self._running:
            await asyncio.wait(set(self._running), timeout=grace)
        for conn in list(self.connections):
            conn.close()
        for child in list(self._children):
            _end(child)
        self._sock.close()

    async def relay(self, host: str, port: int, reader: asyncssh.SSHReader[bytes],
                    writer: asyncssh.SSHWriter[bytes]) -> None:
        """A tunnel: the client's bytes to ``host:port`` and back."""
        try:
            target_reader, target_writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            writer.write_eof()
            writer.close()
            log.info("ssh: tunnel to %s:%d failed (%s)", host, port, exc.strerror or exc)
            return

        async def inbound() -> None:
            while data := await reader.read(READ_BYTES):
                self.activity.forwarded(len(data))
                target_writer.write(data)
                await target_writer.drain()
            with contextlib.suppress(OSError):
                target_writer.write_eof()

        async def outbound() -> None:
            while data := await target_reader.read(READ_BYTES):
                writer.write(data)
                await writer.drain()
            writer.write_eof()

        try:
            await asyncio.gather(inbound(), outbound())
        except (OSError, asyncssh.Error):
            pass
        finally:
            target_writer.close()
            writer.close()

    async def _run(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """A shell or a command, in the workspace, with the task's environment."""
        terminal = process.term_type is not None
        argv = command_line(shell_of(self.environ), process.command, terminal)
        env = dict(self.environ)
        if terminal:
            env["TERM"] = str(process.term_type)
        self.activity.event("command" if process.command is not None else "shell")
        serving = asyncio.current_task() if process.command is not None else None
        if serving is not None:
            self._running.add(serving)
        try:
            try:
                code = await (self._in_terminal(process, argv, env) if terminal
                              else self._in_pipes(process, argv, env))
            except OSError as exc:
                process.stderr.write(f"podcode: cannot start {argv[0]}: {exc}\r\n".encode())
                code = 127
            process.exit(code)
            # Its output and exit status delivered (the client closes its side once it has
            # them), before a closing session may end the connection.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait_closed(), CLOSE_SECONDS)
        finally:
            self._running.discard(serving)

    async def _in_pipes(self, process: asyncssh.SSHServerProcess[bytes], argv: list[str],
                        env: dict[str, str]) -> int:
        child = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=self.workspace, env=env,
            start_new_session=True,
        )
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        stdin = child.stdin

        async def feed() -> None:
            while data := await process.stdin.read(READ_BYTES):
                self.activity.event("input")
                stdin.write(data)
                await stdin.drain()
            stdin.close()

        return await self._supervise(process, child, feed(), [
            _copy(child.stdout, process.stdout), _copy(child.stderr, process.stderr)])

    async def _in_terminal(self, process: asyncssh.SSHServerProcess[bytes], argv: list[str],
                           env: dict[str, str]) -> int:
        main, tty = os.openpty()
        _set_size(tty, process.term_size)
        setsid = shutil.which("setsid")  # util-linux: the shell gets the terminal as its own
        launch = [setsid, "--ctty", "--wait", *argv] if setsid else argv
        try:
            child = await asyncio.create_subprocess_exec(
                *launch, stdin=tty, stdout=tty, stderr=tty, cwd=self.workspace, env=env,
                start_new_session=not setsid,
            )
        finally:
            os.close(tty)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(main), "rb", 0))

        async def feed() -> None:
            while True:
                try:
                    data = await process.stdin.read(READ_BYTES)
                except asyncssh.TerminalSizeChanged as change:
                    _set_size(main, (change.width, change.height, change.pixwidth,
                                     change.pixheight))
                    continue
                if not data:
                    return
                self.activity.event("typing")
                await loop.run_in_executor(None, os.write, main, data)

        try:
            return await self._supervise(process, child, feed(), [_copy(reader, process.stdout)])
        finally:
            transport.close()
            os.close(main)

    async def _supervise(self, process: asyncssh.SSHServerProcess[bytes],
                         child: asyncio.subprocess.Process, feed: Any, copies: list[Any]) -> int:
        """Wait for ``child`` while ``feed`` gives it the client's input and ``copies``
        bring its output back; hang up on it if the client leaves first."""
        self._children.add(child)
        feeding = asyncio.ensure_future(feed)
        output = asyncio.gather(*copies, return_exceptions=True)
        ended = asyncio.ensure_future(child.wait())
        left = asyncio.ensure_future(process.wait_closed())
        try:
            await asyncio.wait({ended, left}, return_when=asyncio.FIRST_COMPLETED)
            if not ended.done():
                _end(child)
            code = await ended
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(output), 5)
            return code if code >= 0 else 128 - code
        finally:
            left.cancel()
            feeding.cancel()
            output.cancel()
            _end(child)
            self._children.discard(child)


async def _copy(source: Any, target: Any) -> None:
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await source.read(READ_BYTES):
            target.write(data)


def _end(child: asyncio.subprocess.Process) -> None:
    """Hang up on what a connection started (its whole process group)."""
    if child.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGHUP)
