"""Claim ports: the configured one, else the next free one (logged), else a clear error.

A port is claimed by binding *and listening* on it, never by probing and releasing it
for another component to take: two sessions started at the same moment would both see
the port free, and one would lose it (on Linux two ``SO_REUSEADDR`` sockets may even
bind the same port; only ``listen`` tells them apart)."""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable

from interactive.base.errors import SessionError

log = logging.getLogger(__name__)

SPAN = 20
"""How many ports above the configured one are tried."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def bind_free(
    host: str,
    port: int,
    setting: str,
    span: int = SPAN,
    make: Callable[[str, int], socket.socket] = listen_socket,
) -> socket.socket:
    """Claim ``port`` or one of the next ``span`` ports with ``make`` (which must bind and
    listen); name the setting when none is free."""
    candidates = [0] if port == 0 else range(port, min(port + span, 65535) + 1)
    last: OSError | None = None
    for candidate in candidates:
        try:
            sock = make(host, candidate)
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            last = exc
            continue
        if port and candidate != port:
            log.warning("%s %d on %s is in use; using %d instead", setting, port, host, candidate)
        return sock
    raise SessionError(
        f"{setting} {port} on {host} and the next {span} ports are in use ({last}); "
        f"set {setting}= or PODCODE_{setting.upper()} to a free port, or 0 for any free port"
    )


def free_port(host: str, port: int, setting: str) -> int:
    """A port that was free a moment ago, for servers that bind it themselves."""
    with bind_free(host, port, setting) as sock:
        return int(sock.getsockname()[1])


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
