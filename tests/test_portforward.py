"""Port-forwarding through the in-process API server to real loopback listeners."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from interactive.kube.cluster import Cluster
from interactive.kube.errors import status_of
from interactive.kube.portforward import Forwarder
from tests.fake_kube import FakeKube


class EchoServer:
    """A real TCP server on loopback that answers every chunk upper-cased."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data.upper())

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._accept.join(5)
        for thread in self._threads:
            thread.join(5)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def cluster(fake_kube: FakeKube) -> Iterator[Cluster]:
    with Cluster.connect() as connected:
        yield connected


def _exchange(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(payload)
        received = b""
        while len(received) < len(payload):
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        return received


def _forwarder(cluster: Cluster, fake_kube: FakeKube, remote: int) -> Forwarder:
    fake_kube.session_pod("job-1", ports={"code_server": remote, "control": 1, "debug": 2})
    info = cluster.session("job-1")
    return Forwarder(lambda: cluster.open_stream(info, remote), name="job-1")


def test_bytes_go_through_the_stream_both_ways(
    cluster: Cluster, fake_kube: FakeKube, echo: EchoServer
) -> None:
    with _forwarder(cluster, fake_kube, echo.port) as forward:
        assert _exchange(forward.port, b"hello pod") == b"HELLO POD"
        big = bytes(range(97, 123)) * 40_000  # ~1 MB, many frames
        assert _exchange(forward.port, big) == big.upper()
    paths = [r.path for r in fake_kube.requests if r.path.endswith("/portforward")]
    assert paths == ["/api/v1/namespaces/default/pods/job-1/portforward"] * 2
    assert not [t for t in threading.enumerate() if t.name.startswith("Kubernetes port forward")]


def test_each_connection_gets_its_own_stream(
    cluster: Cluster, fake_kube: FakeKube, echo: EchoServer
) -> None:
    results: list[bytes] = []
    with _forwarder(cluster, fake_kube, echo.port) as forward:
        threads = [threading.Thread(target=lambda i=i: results.append(
            _exchange(forward.port, f"c{i}".encode()))) for i in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert sorted(results) == [f"C{i}".encode() for i in range(5)]
    assert echo.connections == 5


def test_a_dropped_stream_reconnects_on_the_next_connection(
    cluster: Cluster, fake_kube: FakeKube, echo: EchoServer, caplog: pytest.LogCaptureFixture
) -> None:
    with _forwarder(cluster, fake_kube, echo.port) as forward:
        assert _exchange(forward.port, b"before") == b"BEFORE"
        with fake_kube.offline():
            assert _exchange(forward.port, b"during") == b""
        assert _exchange(forward.port, b"after") == b"AFTER"
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("port-forward stream failed" in m for m in messages)
    assert any("reconnected" in m for m in messages)


def test_refused_port_forward_is_reported(
    cluster: Cluster, fake_kube: FakeKube, echo: EchoServer, caplog: pytest.LogCaptureFixture
) -> None:
    with _forwarder(cluster, fake_kube, echo.port) as forward:
        fake_kube.fail(403, path="/portforward$")
        assert _exchange(forward.port, b"x") == b""
    assert "may not create pods/portforward in namespace default" in caplog.text


def test_nothing_listening_in_the_pod_is_reported(
    cluster: Cluster, fake_kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with _forwarder(cluster, fake_kube, port) as forward:
        assert _exchange(forward.port, b"x") == b""
    assert f"error forwarding port {port}" in caplog.text


def test_handshake_status_is_read_from_the_clients_reason() -> None:
    refused = ApiException(status=0, reason="Handshake status 403 Forbidden -+-+- {} -+-+- b''")
    assert status_of(refused) == 403
    assert status_of(ApiException(status=0, reason="[Errno 111] Connection refused")) is None
    assert status_of(ApiException(status=404, reason="Not Found")) == 404
