"""gloo's connections in this process: found and shut down, so that no peer waits on it.

torch 2.13's gloo cannot be aborted: the backend's ``abort()`` and
``shutdown()`` do nothing, and ``DistributedDataParallel`` keeps its own
reference to the group, so destroying the group leaves its sockets open until
the process exits. A peer blocked in a collective with this rank (DDP's
gradient all-reduce inside ``loss.backward()``) then waits for the group's
timeout. Shutting down the connections (``shutdown(SHUT_RDWR)``; the
descriptors stay gloo's, never closed here) makes every peer's pending or
later collective fail at once with "Connection closed by peer".

Which sockets are gloo's: at rendezvous every rank publishes the addresses of
its gloo pairs in the group's store (key ``<device>/<group rank>`` under the
group's ``<device type>/`` prefix), as raw ``sockaddr`` structures. A TCP
connection of this process (``/proc/self/net/tcp{,6}`` matched to the socket
inodes of ``/proc/self/fd``) is gloo's when its local endpoint is one of those
addresses (a connection gloo accepted on its listener) or its remote endpoint is
(one it made to a peer's listener). So the store's own connection, podcode's
listeners and any other connection of the process (Ray's gRPC, HTTP clients)
are never touched: the choice is positive, never "every connection but ...".
If the addresses cannot be read (a store that is gone), nothing is shut down.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ESTABLISHED = "01"
DEVICE_TYPES = ("cpu", "cuda")
MAX_DEVICES = 8
"""gloo devices per group (one unless several interfaces are given)."""
TABLES = ("/proc/self/net/tcp", "/proc/self/net/tcp6")


@dataclass(frozen=True)
class Connection:
    """One line of ``/proc/net/tcp{,6}``."""

    inode: int
    state: str
    local: tuple[str, int]
    remote: tuple[str, int]


def _address(field: str) -> tuple[str, int]:
    """``0100007F:1F90`` (the kernel's words, host order) -> ("127.0.0.1", 8080)."""
    raw, port = field.split(":")
    words = bytes.fromhex(raw)
    packed = b"".join(struct.pack("=I", word) for (word,) in struct.iter_unpack(">I", words))
    family = socket.AF_INET if len(packed) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, packed), int(port, 16)


def parse_table(text: str) -> list[Connection]:
    """The connections of one ``/proc/net/tcp`` or ``tcp6`` file."""
    found = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        found.append(Connection(int(parts[9]), parts[3], _address(parts[1]), _address(parts[2])))
    return found


def _patterns(endpoint: tuple[str, int]) -> Iterator[re.Pattern[bytes]]:
    """How ``endpoint`` reads inside a ``sockaddr_in`` or ``sockaddr_in6``."""
    host, port = endpoint
    port_bytes = struct.pack("!H", port)
    if ":" in host and host.lower().startswith("::ffff:") and "." in host:
        host = host[7:]  # an IPv4 peer of a dual-stack socket
    if "." in host:
        head = struct.pack("=H", socket.AF_INET) + port_bytes
        yield re.compile(re.escape(head + socket.inet_pton(socket.AF_INET, host)))
        return
    head = struct.pack("=H", socket.AF_INET6) + port_bytes
    addr = socket.inet_pton(socket.AF_INET6, host)
    yield re.compile(re.escape(head) + b".{4}" + re.escape(addr), re.DOTALL)  # flowinfo between


def published(endpoint: tuple[str, int], blobs: Iterable[bytes]) -> bool:
    """Whether ``endpoint`` is one of the gloo addresses in ``blobs``."""
    if endpoint[1] == 0:
        return False
    patterns = list(_patterns(endpoint))
    return any(p.search(blob) for blob in blobs for p in patterns)


def gloo_inodes(connections: Iterable[Connection], blobs: list[bytes]) -> set[int]:
    """The established connections whose local or remote end is a published gloo address."""
    return {
        c.inode
        for c in connections
        if c.state == ESTABLISHED and (published(c.local, blobs) or published(c.remote, blobs))
    }


# -- the process's sockets -------------------------------------------------------------


def socket_fds(fd_dir: Path = Path("/proc/self/fd")) -> dict[int, int]:
    """Socket inode -> this process's descriptor for it."""
    found = {}
    for name in os.listdir(fd_dir):
        with contextlib.suppress(OSError):
            target = os.readlink(fd_dir / name)
            if target.startswith("socket:["):
                found[int(target[8:-1])] = int(name)
    return found


def connections() -> list[Connection]:
    """Every TCP connection of this network namespace."""
    found = []
    for table in TABLES:
        with contextlib.suppress(OSError):
            found += parse_table(Path(table).read_text())
    return found


def shut_down(fds: Iterable[int]) -> int:
    """``shutdown(SHUT_RDWR)`` each descriptor, left open (it is gloo's); how many."""
    done = 0
    for fd in fds:
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            sock.shutdown(socket.SHUT_RDWR)
            done += 1
        except OSError as exc:
            log.debug("fd %d: %s", fd, exc)
        finally:
            sock.detach()
    return done


# -- the groups' stores ----------------------------------------------------------------


def _groups(dist: Any) -> list[tuple[Any, Any]]:
    """(process group, its store) for each gloo group this process is in."""
    world = getattr(dist.distributed_c10d, "_world", None)
    pg_map = getattr(world, "pg_map", None) or {}
    return [(pg, store) for pg, (backend, store) in pg_map.items() if "gloo" in str(backend)]


def _keys(dist: Any, pg: Any, store: Any) -> Iterator[tuple[Any, str, int]]:
    """(device type's store, key, group rank) for every gloo address key of ``pg`` that
    is still in the store."""
    for device in DEVICE_TYPES:
        scoped = dist.PrefixStore(f"{device}/", store)
        for index in range(MAX_DEVICES):
            keys = [f"{index}/{rank}" for rank in range(pg.size())]
            present = [(scoped, key, rank) for rank, key in enumerate(keys) if scoped.check([key])]
            if not present:  # (a rank that failed first has deleted its own key)
                break
            yield from present


ABSENT = b"\0podcode: no such key"
"""What :func:`_read` compares a key with: a value no rank ever publishes."""


def _read(store: Any, key: str) -> bytes | None:
    """``key``'s value, or None when it is not there, without waiting for it: a peer that
    fails at the same moment deletes its own key, and a store's ``get`` of a missing key
    blocks until the store's timeout (30 minutes). ``compare_set`` with an expected value
    no key holds only reads (TCPStore, PrefixStore, HashStore, FileStore)."""
    value = bytes(store.compare_set(key, ABSENT, ABSENT))
    return None if value == ABSENT else value


def addresses(dist: Any, forget_own: bool = False) -> list[bytes]:
    """What every rank of every gloo group published; ``forget_own``: then delete this
    rank's keys, so that a group formed again under the same name (by the task's own
    ``init_process_group``) never reads this generation's stale addresses."""
    blobs = []
    for pg, store in _groups(dist):
        try:
            for scoped, key, rank in _keys(dist, pg, store):
                value = _read(scoped, key)
                if value is None:  # deleted since it was seen (a peer failing at once)
                    continue
                blobs.append(value)
                if forget_own and rank == pg.rank():
                    scoped.delete_key(key)
        except Exception as exc:  # the store is gone: nothing to match against
            log.warning("cannot read gloo's addresses from the group's store: %s", exc)
    return blobs


def cut(dist: Any) -> int:
    """Shut down this process's gloo connections; how many were."""
    blobs = addresses(dist, forget_own=True)
    if not blobs:
        return 0
    fds = socket_fds()
    mine = [c for c in connections() if c.inode in fds]
    return shut_down(fds[inode] for inode in gloo_inodes(mine, blobs))
