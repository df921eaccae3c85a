"""A local listener that relays each connection through a Kubernetes port-forward.

Like ``kubectl port-forward``: every accepted local connection gets its own
``kubernetes.stream.portforward`` WebSocket to the pod's port, so a stream
that drops only ends that one connection and the next connection opens a new
stream (reconnecting when the API server is back).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import portforward

from interactive.base.threads import start_thread
from interactive.kube.errors import Call, KubeError, translate

log = logging.getLogger(__name__)

_PROXY_THREAD = "Kubernetes port forward proxy"
_OPEN_LOCK = threading.Lock()
POLL_SECONDS = 0.25
"""How often relay threads look at the stop flag."""


class PortStream:
    """One WebSocket port-forward stream; ``socket`` talks to the pod's port."""

    def __init__(self, forward: Any, port: int, proxy: threading.Thread | None) -> None:
        self._forward = forward
        self._proxy = proxy
        self.port = port
        self.socket: Any = forward.socket(port)

    def error(self) -> str | None:
        """What the kubelet said on the port's error channel (e.g. connection refused)."""
        text = self._forward.error(self.port)
        return str(text) if text else None

    def close(self) -> None:
        """Close our end; the client's proxy thread then closes the WebSocket."""
        self.socket.close()
        if self._proxy is not None:
            self._proxy.join(5)
            if self._proxy.is_alive():
                return
        self._forward.websocket.shutdown()


def open_port_stream(api: CoreV1Api, pod: str, namespace: str, port: int) -> PortStream:
    """A new port-forward stream to ``pod``'s ``port``; raises a :class:`KubeError`."""
    with _OPEN_LOCK:
        before = set(threading.enumerate())
        try:
            forward = portforward(
                api.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port)
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            host = str(api.api_client.configuration.host)
            call = Call("create", "pods/portforward", namespace, "stream", pod=pod, host=host)
            raise translate(exc, call) from None
        proxy = next((t for t in threading.enumerate()
                      if t not in before and t.name.startswith(_PROXY_THREAD)), None)
    return PortStream(forward, port, proxy)


def splice(one: Any, other: Any, stop: threading.Event) -> None:
    """Copy bytes both ways until either side ends or ``stop`` is set."""
    selector = selectors.DefaultSelector()
    selector.register(one, selectors.EVENT_READ, other)
    selector.register(other, selectors.EVENT_READ, one)
    try:
        while not stop.is_set():
            for key, _ in selector.select(POLL_SECONDS):
                try:
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
                except OSError:
                    return
    finally:
        selector.close()


class Forwarder:
    """Listen on ``host:local_port`` and relay each connection through a new stream."""

    def __init__(
        self,
        open_stream: Callable[[], PortStream],
        *,
        local_port: int = 0,
        host: str = "127.0.0.1",
        name: str = "pod",
    ) -> None:
        self._open_stream = open_stream
        self._name = name
        self._stop = threading.Event()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._failing = False
        self._listener = socket.create_server((host, local_port))
        self._listener.settimeout(POLL_SECONDS)
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._acceptor: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Forwarder:
        """Start accepting (once; entering the context manager starts it too)."""
        if self._acceptor is None:
            self._acceptor = start_thread(self._accept, f"forward-{self.port}")
        return self

    def close(self) -> None:
        self._stop.set()
        if self._acceptor is not None and self._acceptor.is_alive():
            self._acceptor.join(5)
        self._listener.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(10)

    def __enter__(self) -> Forwarder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._threads.add(start_thread(self._serve, f"forward-{self.port}-conn", conn))

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                stream = self._open()
                if stream is None:
                    return
                try:
                    conn.settimeout(None)
                    splice(conn, stream.socket, self._stop)
                    error = stream.error()
                    if error:
                        log.warning("%s: %s", self._name, error.strip())
                finally:
                    stream.close()
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _open(self) -> PortStream | None:
        try:
            stream = self._open_stream()
        except KubeError as exc:
            if not self._failing:
                log.warning("%s: the port-forward stream failed (%s); retrying on the next "
                            "connection", self._name, exc)
            self._failing = True
            return None
        if self._failing:
            log.warning("%s: port-forward reconnected", self._name)
            self._failing = False
        return stream
