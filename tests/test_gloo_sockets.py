"""Finding and shutting down gloo's connections: on real sockets, and in a real gloo group of
two processes started by ``torch.multiprocessing.spawn`` (no ``RANK`` variable)."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interactive.distributed import gloo_sockets
from interactive.distributed.gloo_sockets import Connection


def sockaddr_in(endpoint: tuple[str, int]) -> bytes:
    """A ``sockaddr_storage`` as gloo publishes it (family in host order, then port, address)."""
    host, port = endpoint
    head = struct.pack("=H", socket.AF_INET) + struct.pack("!H", port)
    return (head + socket.inet_aton(host)).ljust(128, b"\0") + struct.pack("=q", 1)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket, socket.socket]]:
    """A listener on loopback, a connection to it and the accepted end."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        yield listener, client, accepted
        client.close()
        accepted.close()


def mine() -> list[Connection]:
    fds = gloo_sockets.socket_fds()
    return [c for c in gloo_sockets.connections() if c.inode in fds]


def inode(sock: socket.socket) -> int:
    return os.fstat(sock.fileno()).st_ino


def test_the_kernels_table_is_read_as_addresses(pair: Any) -> None:
    listener, client, accepted = pair
    found = {c.inode: c for c in mine()}
    row = found[inode(client)]
    assert row.state == gloo_sockets.ESTABLISHED
    assert row.local == client.getsockname() and row.remote == listener.getsockname()
    assert found[inode(listener)].state == "0A"  # LISTEN


def test_ipv6_addresses_are_read_too() -> None:
    line = ("  0: 00000000000000000000000001000000:1F90 0000000000000000FFFF00000100007F:D431 "
            "01 00000000:00000000 00:00000000 00000000 1000 0 4242 1")
    [row] = gloo_sockets.parse_table("header\n" + line)
    assert row.local == ("::1", 8080) and row.remote == ("::ffff:127.0.0.1", 54321)
    assert row.inode == 4242


def test_a_connection_is_gloos_when_either_end_is_a_published_address(pair: Any) -> None:
    listener, client, accepted = pair
    with socket.create_server(("127.0.0.1", 0)) as other:  # the store, say: not published
        unrelated = socket.create_connection(other.getsockname())
        served, _ = other.accept()
        try:
            blobs = [b"hostname" + sockaddr_in(listener.getsockname())]
            found = gloo_sockets.gloo_inodes(mine(), blobs)
            # Both ends live in this process: the connecting one (remote is published) and
            # the accepted one (local is); never the listener, never the other connection.
            assert found == {inode(client), inode(accepted)}
        finally:
            unrelated.close()
            served.close()


def test_an_ipv4_peer_of_a_dual_stack_socket_matches_its_ipv4_address() -> None:
    blob = sockaddr_in(("127.0.0.1", 40059))
    assert gloo_sockets.published(("::ffff:127.0.0.1", 40059), [blob])
    assert not gloo_sockets.published(("127.0.0.1", 40058), [blob])
    assert not gloo_sockets.published(("0.0.0.0", 0), [blob])


def test_shutting_down_ends_the_peers_wait_and_leaves_the_descriptor_open(pair: Any) -> None:
    _, client, accepted = pair
    assert gloo_sockets.shut_down([accepted.fileno()]) == 1
    client.settimeout(5)
    assert client.recv(1) == b""  # the peer sees the connection closed
    assert os.fstat(accepted.fileno())  # still this process's descriptor (gloo's, not ours)


# -- a real gloo group ---------------------------------------------------------------


def _rank(rank: int, port: int, folder: str) -> None:
    """One rank: rank 1 cuts its gloo connections while rank 0 waits in an all-reduce."""
    import torch
    import torch.distributed as dist

    from interactive.distributed import ranks

    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    seen = ranks.detect()  # no RANK variable: read from the group
    report = Path(folder) / f"rank-{rank}"
    if rank == 1:
        cut = gloo_sockets.cut(dist)
        store.set("cut", str(cut))
        report.write_text(f"{seen.rank}/{seen.world_size} cut {cut}")
        store.wait(["done"])
        return
    try:
        dist.all_reduce(torch.ones(1))
        outcome = "all-reduce returned"
    except RuntimeError as exc:
        outcome = str(exc)
    # The store's connection was left alone: it still answers.
    keys = dist.PrefixStore("cpu/", dist.distributed_c10d._world.pg_map[
        dist.distributed_c10d._get_default_group()][1])
    outcome += f" | cut={store.get('cut').decode()} | rank 1's address kept={keys.check(['0/1'])}"
    report.write_text(f"{seen.rank}/{seen.world_size} {outcome}")
    store.set("done", "1")


@pytest.mark.slow
def test_a_rank_that_cuts_its_gloo_connections_makes_the_peer_in_a_collective_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mp = pytest.importorskip("torch.multiprocessing")
    from tests.torchrun_job import free_port

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    mp.spawn(_rank, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    rank0, rank1 = ((tmp_path / f"rank-{r}").read_text() for r in (0, 1))
    assert rank1.startswith("1/2 cut ") and int(rank1.split()[-1]) >= 1
    assert rank0.startswith("0/2 ") and "Connection closed by peer" in rank0
    assert "cut=" in rank0 and "rank 1's address kept=False" in rank0  # no stale address


def test_a_key_a_failing_peer_deleted_is_skipped_without_waiting_for_it() -> None:
    """Two ranks failing at once: the other deletes its address key between our check and
    our read; a store's get would wait for it until the store's timeout (30 minutes)."""
    import datetime

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(minutes=30))
    scoped = dist.PrefixStore("cpu/", store)
    scoped.set("0/1", b"published")
    assert gloo_sockets._read(scoped, "0/1") == b"published"
    scoped.delete_key("0/1")
    assert gloo_sockets._read(scoped, "0/1") is None  # at once, not in 30 minutes
    assert not scoped.check(["0/1"])  # and nothing was written
