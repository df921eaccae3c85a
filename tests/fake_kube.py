"""An in-process Kubernetes API server for the tests (a pytest plugin).

It speaks the REST calls podcode makes, for the real ``kubernetes`` client
pointed at it through a kubeconfig file (token auth, plain HTTP on 127.0.0.1):

- pods: get, list (namespaced and across namespaces, label selectors,
  ``limit``/``continue`` pagination), strategic-merge / merge patches of
  metadata labels and annotations (``null`` removes a key), delete;
- events: create; SelfSubjectAccessReview (configurable denied verbs);
- the port-forward and exec WebSocket protocols (``v4.channel.k8s.io``):
  port-forward relays to a real process listening on ``127.0.0.1``; exec runs
  the command as a real local process (the "pod" is this machine).

Every request is recorded (method, path, query, body) for assertions. The
server can be told to answer 403 or 500 for a path or verb, or to be down.
It runs its own event loop in a background thread, so sync and async tests
use it alike (async tests call the blocking client in an executor).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import re
import socket
import ssl
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from aiohttp import WSMsgType, web

TOKEN = "fake-kube-token"
V4 = "v4.channel.k8s.io"
ExecHandler = Callable[[dict[str, Any], str, list[str]], tuple[int, bytes, bytes]]


@dataclass(frozen=True)
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    content_type: str


@dataclass
class _Failure:
    status: int
    method: str | None
    path: re.Pattern[str] | None
    times: int | None

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method != method:
            return False
        return self.path is None or bool(self.path.search(path))


@dataclass
class _State:
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    port_maps: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    failures: list[_Failure] = field(default_factory=list)
    denied: set[tuple[str, str]] = field(default_factory=set)
    version: int = 1000


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
            409: "Conflict", 500: "InternalError", 503: "ServiceUnavailable"}


def _error(code: int, message: str) -> web.Response:
    return web.json_response(status_body(code, _REASONS.get(code, "Unknown"), message), status=code)


# --- label selectors --------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part.strip() for part in [*parts, current] if part.strip()]


def _requirement(term: str) -> Callable[[dict[str, str]], bool]:
    match = _SET_RE.match(term)
    if match:
        key, op, values = match.group(1), match.group(2), {
            v.strip() for v in match.group(3).split(",")
        }
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if "!=" in term:
        key, value = (s.strip() for s in term.split("!=", 1))
        return lambda labels: labels.get(key) != value
    if "=" in term:
        key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
        return lambda labels: labels.get(key) == value
    if term.startswith("!"):
        return lambda labels: term[1:].strip() not in labels
    return lambda labels: term in labels


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """A predicate over a label dict for a Kubernetes label selector string."""
    requirements = [_requirement(term) for term in _split_selector(selector or "")]
    return lambda labels: all(req(labels) for req in requirements)


# --- patches ----------------------------------------------------------------------------------


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge (what strategic merge does for metadata maps): null deletes."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def run_locally(pod: dict[str, Any], container: str, argv: list[str]) -> tuple[int, bytes, bytes]:
    """Default exec: the pod is this machine; run ``argv`` as a real process."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except FileNotFoundError:
        return 126, b"", f"exec: {argv[0]!r}: executable file not found".encode()
    return done.returncode, done.stdout, done.stderr


class FakeKube:
    """The fake API server: start(), then point the real client at ``kubeconfig``."""

    def __init__(self, directory: Path, ssl_context: ssl.SSLContext | None = None) -> None:
        self.directory = directory
        self.ssl_context = ssl_context
        """Serve HTTPS with this (as an in-cluster API server does); plain HTTP when None."""
        self.kubeconfig = directory / "kubeconfig"
        self.token = TOKEN
        self.port = 0
        self.exec_handler: ExecHandler = run_locally
        self._state = _State()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> FakeKube:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fake-kube", daemon=True
        )
        self._thread.start()
        self._call(self._serve())
        self.write_kubeconfig(self.kubeconfig)
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    def down(self) -> None:
        """Stop answering: connections are refused until :meth:`up`."""
        self._call(self._shutdown())

    def up(self) -> None:
        self._call(self._serve())

    @contextlib.contextmanager
    def offline(self) -> Iterator[None]:
        self.down()
        try:
            yield
        finally:
            self.up()

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": self.token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "tester",
                                             "namespace": namespace}}
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.create_server(("127.0.0.1", self.port))  # the same port after up()
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, ssl_context=self.ssl_context).start()

    async def _shutdown(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- test-facing state --------------------------------------------------------------------

    def add_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        containers: tuple[str, ...] = ("main",),
        phase: str = "Running",
        port_map: dict[int, int] | None = None,
    ) -> dict[str, Any]:
        """Store a pod; ``port_map`` sends the pod's port K to 127.0.0.1:V when forwarding."""
        with self._lock:
            self._state.version += 1
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": str(self._state.version),
                    "creationTimestamp": _now(),
                    "labels": dict(labels or {}),
                    "annotations": dict(annotations or {}),
                },
                "spec": {"containers": [{"name": c, "image": "python:3.11"} for c in containers]},
                "status": {"phase": phase},
            }
            self._state.pods[(namespace, name)] = pod
            self._state.port_maps[(namespace, name)] = dict(port_map or {})
            return copy.deepcopy(pod)

    def session_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        state: str = "waiting",
        task: str = "train.fit",
        ports: dict[str, int] | None = None,
        home: str = "/root/.podcode",
        extra_annotations: dict[str, str] | None = None,
        extra_labels: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A pod as a running podcode session marks itself."""
        annotations = {
            "podcode.io/task": task,
            "podcode.io/home": home,
            "podcode.io/ports": json.dumps(
                ports or {"code_server": 8080, "control": 8081, "debug": 5678}
            ),
            **(extra_annotations or {}),
        }
        labels = {"podcode.io/session": "true", "podcode.io/state": state, **(extra_labels or {})}
        return self.add_pod(name, namespace, labels=labels, annotations=annotations, **kwargs)

    def remove_pod(self, name: str, namespace: str = "default") -> None:
        """The pod disappears (deleted by someone else)."""
        with self._lock:
            self._state.pods.pop((namespace, name), None)

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        with self._lock:
            found = self._state.pods.get((namespace, name))
            return copy.deepcopy(found) if found else None

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._state.requests)

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._state.events)

    def clear_requests(self) -> None:
        with self._lock:
            self._state.requests.clear()

    def fail(
        self, status: int = 500, *, method: str | None = None, path: str | None = None,
        times: int | None = None,
    ) -> None:
        """Answer ``status`` to requests matching ``method`` and the ``path`` regex."""
        with self._lock:
            pattern = re.compile(path) if path is not None else None
            self._state.failures.append(_Failure(status, method, pattern, times))

    def heal(self) -> None:
        with self._lock:
            self._state.failures.clear()

    def deny(self, verb: str, resource: str) -> None:
        """SelfSubjectAccessReview answers not-allowed for ``verb`` on ``resource``
        (``pods``, ``pods/portforward``, ``events``...)."""
        with self._lock:
            self._state.denied.add((verb, resource))

    # --- dispatch -----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token != self.token:  # the scheme is case-insensitive
            return _error(401, "Unauthorized")
        failure = self._failure_for(request.method, request.path)
        if failure is not None:
            return _error(failure, f"injected failure for {request.method} {request.path}")
        return await self._route(request, body)

    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        query: dict[str, list[str]] = {}
        for key, value in request.query.items():
            query.setdefault(key, []).append(value)
        entry = Recorded(request.method, request.path, query, body,
                         request.headers.get("Content-Type", ""))
        with self._lock:
            self._state.requests.append(entry)
        return body

    def _failure_for(self, method: str, path: str) -> int | None:
        with self._lock:
            for failure in self._state.failures:
                if failure.matches(method, path):
                    if failure.times is not None:
                        failure.times -= 1
                        if failure.times <= 0:
                            self._state.failures.remove(failure)
                    return failure.status
        return None

    async def _route(self, request: web.Request, body: Any) -> web.StreamResponse:
        path, method = request.path.rstrip("/"), request.method
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            return self._access_review(body)
        if path == "/api/v1/pods" and method == "GET":
            return self._list(request, None)
        match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(pods|events)(?:/([^/]+))?(?:/(\w+))?",
                             path)
        if not match:
            return _error(404, f"the server could not find the requested resource ({path})")
        namespace, kind, name, sub = match.groups()
        if kind == "events":
            return self._create_event(namespace, body) if method == "POST" and not name else \
                _error(405, "method not allowed")
        if name is None:
            return self._list(request, namespace) if method == "GET" else _error(405, "no")
        if sub == "portforward":
            return await self._portforward(request, namespace, name)
        if sub == "exec":
            return await self._exec(request, namespace, name)
        handlers = {"GET": self._get, "PATCH": self._patch, "DELETE": self._delete}
        if sub is not None or method not in handlers:
            return _error(405, f"{method} {path} is not supported by the fake")
        return handlers[method](namespace, name, body)

    # --- REST ---------------------------------------------------------------------------------

    def _not_found(self, namespace: str, name: str) -> web.Response:
        return _error(404, f'pods "{name}" not found in namespace "{namespace}"')

    def _get(self, namespace: str, name: str, body: Any) -> web.Response:
        pod = self.pod(name, namespace)
        return web.json_response(pod) if pod else self._not_found(namespace, name)

    def _patch(self, namespace: str, name: str, body: Any) -> web.Response:
        if not isinstance(body, dict):
            return _error(400, "the fake accepts merge patches (objects) only")
        with self._lock:
            pod = self._state.pods.get((namespace, name))
            if pod is None:
                return self._not_found(namespace, name)
            metadata = body.get("metadata", {})
            for key in ("labels", "annotations"):
                if key in metadata:
                    merge_patch(pod["metadata"].setdefault(key, {}), metadata[key] or {})
            self._state.version += 1
            pod["metadata"]["resourceVersion"] = str(self._state.version)
            return web.json_response(copy.deepcopy(pod))

    def _delete(self, namespace: str, name: str, body: Any) -> web.Response:
        with self._lock:
            pod = self._state.pods.pop((namespace, name), None)
        return web.json_response(pod) if pod else self._not_found(namespace, name)

    def _list(self, request: web.Request, namespace: str | None) -> web.Response:
        matches = label_matcher(request.query.get("labelSelector"))
        limit = int(request.query.get("limit", "0") or 0)
        start = int(base64.b64decode(request.query["continue"]).decode()) \
            if request.query.get("continue") else 0
        with self._lock:
            keys = sorted(k for k in self._state.pods if namespace is None or k[0] == namespace)
            pods = [self._state.pods[k] for k in keys]
            selected = [p for p in pods if matches(p["metadata"].get("labels") or {})]
            version = str(self._state.version)
        page = selected[start:start + limit] if limit else selected[start:]
        end = start + len(page)
        meta: dict[str, Any] = {"resourceVersion": version}
        if limit and end < len(selected):
            meta["continue"] = base64.b64encode(str(end).encode()).decode()
            meta["remainingItemCount"] = len(selected) - end
        return web.json_response({"apiVersion": "v1", "kind": "PodList", "metadata": meta,
                                  "items": page})

    def _create_event(self, namespace: str, body: Any) -> web.Response:
        if not isinstance(body, dict):
            return _error(400, "event body must be an object")
        event = copy.deepcopy(body)
        event.setdefault("metadata", {}).setdefault("namespace", namespace)
        with self._lock:
            self._state.events.append(event)
        return web.json_response(event, status=201)

    def _access_review(self, body: Any) -> web.Response:
        attrs = (body or {}).get("spec", {}).get("resourceAttributes", {})
        resource = attrs.get("resource", "")
        if attrs.get("subresource"):
            resource = f"{resource}/{attrs['subresource']}"
        with self._lock:
            allowed = (attrs.get("verb", ""), resource) not in self._state.denied
        answer = dict(body or {})
        answer["status"] = {"allowed": allowed} if allowed else {
            "allowed": False, "reason": "denied by the fake's policy"}
        return web.json_response(answer, status=201)

    # --- WebSocket: port-forward and exec -----------------------------------------------------

    async def _open_ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=(V4,))
        await ws.prepare(request)
        self._sockets.add(ws)
        return ws

    async def _portforward(
        self, request: web.Request, namespace: str, name: str
    ) -> web.StreamResponse:
        if self.pod(name, namespace) is None:
            return self._not_found(namespace, name)
        ports = [int(p) for value in request.query.getall("ports", []) for p in value.split(",")]
        ws = await self._open_ws(request)
        try:
            await self._relay_ports(ws, namespace, name, ports)
        finally:
            self._sockets.discard(ws)
            await ws.close()
        return ws

    async def _relay_ports(self, ws: web.WebSocketResponse, namespace: str, name: str,
                           ports: list[int]) -> None:
        with self._lock:
            port_map = dict(self._state.port_maps.get((namespace, name), {}))
        writers: dict[int, asyncio.StreamWriter] = {}
        pumps: list[asyncio.Task[None]] = []
        for index, port in enumerate(ports):
            prefix = port.to_bytes(2, "little")
            await ws.send_bytes(bytes([2 * index]) + prefix)
            await ws.send_bytes(bytes([2 * index + 1]) + prefix)
            try:
                target = port_map.get(port, port)
                reader, writer = await asyncio.open_connection("127.0.0.1", target)
            except OSError as exc:
                message = f"error forwarding port {port} to pod {name}: {exc}"
                await ws.send_bytes(bytes([2 * index + 1]) + message.encode())
                return
            writers[2 * index] = writer
            pumps.append(asyncio.ensure_future(self._pump(reader, ws, 2 * index)))
        try:
            await self._from_client(ws, writers, pumps)
        finally:
            for task in pumps:
                task.cancel()
            for writer in writers.values():
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, ws: web.WebSocketResponse, channel: int) -> None:
        while data := await reader.read(65536):
            await ws.send_bytes(bytes([channel]) + data)
        await ws.close()

    @staticmethod
    async def _from_client(ws: web.WebSocketResponse, writers: dict[int, asyncio.StreamWriter],
                           pumps: list[asyncio.Task[None]]) -> None:
        async for message in ws:
            if message.type != WSMsgType.BINARY or not message.data:
                continue
            writer = writers.get(message.data[0])
            if writer is not None and len(message.data) > 1:
                writer.write(message.data[1:])
                await writer.drain()

    async def _exec(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pod = self.pod(name, namespace)
        if pod is None:
            return self._not_found(namespace, name)
        containers = [c["name"] for c in pod["spec"]["containers"]]
        container = request.query.get("container") or containers[0]
        if container not in containers:
            return _error(400, f"container {container} is not valid for pod {name}")
        argv = request.query.getall("command", [])
        loop = asyncio.get_running_loop()
        code, out, err = await loop.run_in_executor(None, self.exec_handler, pod, container, argv)
        ws = await self._open_ws(request)
        try:
            if out:
                await ws.send_bytes(b"\x01" + out)
            if err:
                await ws.send_bytes(b"\x02" + err)
            await ws.send_bytes(b"\x03" + json.dumps(_exec_status(code)).encode())
        finally:
            self._sockets.discard(ws)
            await ws.close()
        return ws


def _exec_status(code: int) -> dict[str, Any]:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


@pytest.fixture
def fake_kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    """A running fake API server; ``KUBECONFIG`` points at it for the test's duration."""
    directory = tmp_path / "fake-kube"
    directory.mkdir()
    fake = FakeKube(directory).start()
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig))
    try:
        yield fake
    finally:
        fake.stop()
