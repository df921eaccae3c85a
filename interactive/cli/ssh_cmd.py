"""``podcode ssh-config | ssh | ssh-proxy [POD]``: desktop editors into a session over SSH.

``ssh-config`` prints an OpenSSH ``Host`` block for VS Code Remote-SSH, JetBrains Gateway,
``ssh``, ``sftp``, ``scp`` and ``rsync``. Its ``ProxyCommand`` is ``podcode ssh-proxy``,
which reaches the session the way every verb does (the local record, or the pod's through
the Kubernetes API), pins the session's host key in podcode's own ``known_hosts`` (no
prompt, and host-key checking stays on), hands the session the user's public key over the
authenticated control API, and relays the SSH bytes: through a port-forward stream for a
pod, over loopback for a local session. ``ssh`` does all of it for one command or shell.
"""

from __future__ import annotations

import argparse
import os
import selectors
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from interactive.base.files import write_bytes
from interactive.base.record import SessionRecord
from interactive.base.settings import podcode_home
from interactive.cli.errors import CliError, Exit
from interactive.cli.target import open_record, open_target
from interactive.cli.terminal import Console

KEY_NAME = "id_ed25519"
CHUNK = 65536


def ssh_folder(environ: Mapping[str, str]) -> Path:
    """podcode's SSH files on this machine: its key pair and the pinned host keys."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or Path.home())
                                                 / ".config")
    return Path(base) / "podcode" / "ssh"


def ensure_key(folder: Path) -> Path:
    """podcode's private key (ed25519, made with ``ssh-keygen`` the first time)."""
    key = folder / KEY_NAME
    if key.exists():
        return key
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise CliError("ssh-keygen is not installed: install the OpenSSH client "
                       "(apt-get install openssh-client, brew install openssh)", Exit.FAILED)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    done = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "podcode",
                           "-f", str(key)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CliError(f"ssh-keygen could not make {key}: {done.stderr.strip()}", Exit.FAILED)
    return key


def alias_of(args: argparse.Namespace) -> str:
    if args.alias:
        return str(args.alias)
    return "podcode-" + (args.pod or "local") + (f"-{args.session}" if args.session else "")


def pin(known_hosts: Path, alias: str, host_key: str) -> None:
    """``known_hosts`` holds ``alias``'s key as the session's record gives it (its other
    aliases kept)."""
    try:
        lines = known_hosts.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    kept = [line for line in lines if not line.startswith(f"{alias} ")]
    known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_bytes(known_hosts, "\n".join([*kept, f"{alias} {host_key}", ""]).encode())


def _quoted(path: Path) -> str:
    text = str(path)
    return f'"{text}"' if " " in text else text


def proxy_argv(args: argparse.Namespace, alias: str, home: Path) -> list[str]:
    """``podcode ssh-proxy`` with the options that reach the same session (for a local
    session, its ``PODCODE_HOME``: an editor may start ssh without it)."""
    argv = [sys.executable, "-m", "interactive.cli", "ssh-proxy"]
    if args.pod:
        argv.append(args.pod)
    else:
        argv = ["env", f"PODCODE_HOME={home}", *argv]
    for option in ("namespace", "context", "kubeconfig", "container", "task", "session"):
        value = getattr(args, option, None)
        if value:
            argv += [f"--{option}", str(value)]
    if getattr(args, "pid", None):
        argv += ["--pid", str(args.pid)]
    return [*argv, "--alias", alias]


def config_block(alias: str, proxy: list[str], identity: Path, known_hosts: Path) -> str:
    """An OpenSSH ``Host`` block; ``%`` in the proxy command is escaped for ssh's tokens."""
    command = shlex.join(proxy).replace("%", "%%")
    return "\n".join([
        f"Host {alias}",
        "  User podcode",
        f"  ProxyCommand {command}",
        f"  IdentityFile {_quoted(identity)}",
        "  IdentitiesOnly yes",
        f"  HostKeyAlias {alias}",
        f"  UserKnownHostsFile {_quoted(known_hosts)}",
        "  StrictHostKeyChecking yes",
        "  PasswordAuthentication no",
        "  KbdInteractiveAuthentication no",
        "  ServerAliveInterval 30",
        "",
    ])


def _serving_ssh(label: str, record: SessionRecord) -> SessionRecord:
    if record.ssh_port is None or not record.ssh_host_key:
        raise CliError(
            f"{label} serves no SSH: its podcode is older, it runs with ssh=False, or "
            "asyncssh is not installed in the task's image (pip install 'podcode[ssh]')",
            Exit.NOT_FOUND,
        )
    return record


def _block(args: argparse.Namespace, console: Console, label: str,
           record: SessionRecord) -> str:
    """Pin the session's host key, make the key pair if need be; the config block."""
    _serving_ssh(label, record)
    folder = ssh_folder(console.environ)
    alias = alias_of(args)
    identity = ensure_key(folder)
    pin(folder / "known_hosts", alias, str(record.ssh_host_key))
    proxy = proxy_argv(args, alias, podcode_home(console.environ))
    return config_block(alias, proxy, identity, folder / "known_hosts")


def ssh_config(args: argparse.Namespace, console: Console) -> int:
    with open_record(args, console) as (label, record):
        console.say(_block(args, console, label, record).rstrip("\n"))
    return Exit.OK


def ssh(args: argparse.Namespace, console: Console) -> int:
    client = shutil.which("ssh")
    if client is None:
        raise CliError("ssh is not installed: install the OpenSSH client", Exit.FAILED)
    with open_record(args, console) as (label, record):
        block = _block(args, console, label, record)
    with tempfile.TemporaryDirectory(prefix="podcode-ssh-") as folder:
        config = Path(folder) / "config"
        write_bytes(config, block.encode())
        command = list(getattr(args, "command", None) or [])
        terminal = [] if command else ["-t"]
        return subprocess.run([client, "-F", str(config), *terminal, alias_of(args), *command],
                              check=False).returncode


def ssh_proxy(args: argparse.Namespace, console: Console) -> int:
    """The ``ProxyCommand``: reach the session's SSH endpoint, relay stdin and stdout."""
    with open_target(args, console) as target:
        record = _serving_ssh(target.label, target.record)
        folder = ssh_folder(console.environ)
        pin(folder / "known_hosts", alias_of(args), str(record.ssh_host_key))
        public = (folder / KEY_NAME).with_suffix(".pub")
        if public.exists():
            target.client.push_ssh_key(public.read_text().strip())
        port = int(record.ssh_port or 0)
        if target.cluster is not None and target.info is not None:
            stream = target.cluster.open_stream(target.info, port)
            try:
                relay(stream.socket)
            finally:
                stream.close()
            return Exit.OK
        host = urlsplit(record.control_url).hostname or "127.0.0.1"  # a connectable one
        with socket.create_connection((host, port)) as sock:
            relay(sock)
    return Exit.OK


def relay(sock: socket.socket, stdin: int = 0, stdout: int = 1) -> None:
    """Copy ``stdin`` to ``sock`` and ``sock`` to ``stdout`` until the session's side ends."""
    selector = selectors.DefaultSelector()
    selector.register(stdin, selectors.EVENT_READ)
    selector.register(sock, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj == stdin:
                    data = os.read(stdin, CHUNK)
                    if data:
                        sock.sendall(data)
                        continue
                    selector.unregister(stdin)
                    sock.shutdown(socket.SHUT_WR)
                    continue
                data = sock.recv(CHUNK)
                if not data:
                    return
                view = memoryview(data)
                while view:
                    view = view[os.write(stdout, view):]
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        selector.close()
