"""The one client of a session's control API, for every door that reaches a session
from outside its event loop: the CLI, the notebook kernel (a process of its own), the
other ranks of a pod. Blocking, standard library only, with a timeout on every call.

Every failure is a :class:`ControlError`: :class:`ControlUnreachable` (no answer, or an
answer that broke off), :class:`ControlUnauthorized` (401: the token is not the
session's), or :class:`ControlRefused` (any other error answer, with the server's own
message as ``reason``; 400 and 409 have their own classes). :func:`refusal` is that
decision, pure; the companion extension's ``lib/client.js`` mirrors it.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from interactive.base import routes
from interactive.base.errors import PodcodeError

TIMEOUT_SECONDS = 15.0
"""How long a call waits on the session's socket (connecting, or between two reads)."""


class ControlError(PodcodeError):
    """The session's control API failed. ``status``: its HTTP status, if it answered;
    ``reason``: its own message, if it gave one."""

    def __init__(self, message: str, status: int | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class ControlUnreachable(ControlError):
    """The session's control API does not answer, or its answer broke off (``why``)."""

    def __init__(self, message: str, why: str | None = None) -> None:
        super().__init__(message)
        self.why = why or message


class ControlUnauthorized(ControlError):
    """The session refused the token (401)."""


class ControlRefused(ControlError):
    """The session answered with an error, its ``reason`` given."""


class ControlBadRequest(ControlRefused):
    """The session rejected the request (400)."""


class ControlConflict(ControlRefused):
    """The session cannot do that now (409: resume while the task runs)."""


def refusal(status: int, data: Mapping[str, Any]) -> ControlError | None:
    """The error an answer with HTTP ``status`` and JSON body ``data`` means (None: it is
    not one)."""
    if status < 400:
        return None
    reason = str(data.get("error") or f"HTTP {status}")
    if status == 401:
        return ControlUnauthorized(
            "the session refused the token (401): the session file is stale, the session "
            "may have restarted; try again", status, reason)
    if status == 409:
        return ControlConflict(reason, status, reason)
    if status == 400:
        return ControlBadRequest(f"the session rejected the request: {reason}", status, reason)
    return ControlRefused(f"the session's control API failed ({status}): {reason}", status,
                          reason)


class ControlClient:
    """``GET /api/status``, ``POST /api/resume``... with the session's bearer token."""

    def __init__(self, url: str, token: str, timeout: float = TIMEOUT_SECONDS,
                 headers: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ControlError(f"the session's control_url {url!r} is not http://host:port")
        self.url = url
        self._host = parts.hostname
        self._port = parts.port or 80
        self._token = token
        self._timeout = timeout
        self._headers = dict(headers or {})
        """Sent with every call (a forwarding rank marks its calls)."""

    # -- the calls -------------------------------------------------------------------
    def healthz(self) -> bool:
        try:
            status, _ = self._request("GET", routes.HEALTHZ, auth=False)
        except ControlError:
            return False
        return status == 200

    def status(self) -> dict[str, Any]:
        return self.call("GET", routes.STATUS)

    def resume(self) -> dict[str, Any]:
        return self.call("POST", routes.RESUME, {})

    def keepalive(self, seconds: float) -> dict[str, Any]:
        return self.call("POST", routes.KEEPALIVE, {"seconds": seconds})

    def abort(self) -> dict[str, Any]:
        return self.call("POST", routes.ABORT, {})

    def push_files(self, files: dict[str, bytes]) -> dict[str, Any]:
        """Write ``files`` (path relative to the workspace -> content) in the session."""
        encoded = {name: base64.b64encode(data).decode() for name, data in files.items()}
        return self.call("POST", routes.FILES, {"files": encoded})

    def push_ssh_key(self, key: str) -> dict[str, Any]:
        """Have the session's SSH endpoint accept the public ``key`` (one line)."""
        return self.call("POST", routes.SSH_KEY, {"key": key})

    def login_link(self, ide_url: str) -> str | None:
        """A link that logs a browser in to code-server at ``ide_url`` once, without the
        password (None: the session gives none, as sessions before links did)."""
        status, data = self._request("POST", routes.LOGIN_LINK, {})
        nonce = data.get("nonce")
        if status >= 400 or not isinstance(nonce, str):
            return None
        return f"{self.url.rstrip('/')}{routes.login(quote(nonce))}?{urlencode({'ide': ide_url})}"

    def frames(self) -> dict[str, Any]:
        """The failure and its frames, innermost first (:data:`routes.FRAMES`)."""
        return self.call("GET", routes.FRAMES)

    def frame_locals(self, index: int) -> dict[str, Any]:
        """Frame ``index``'s locals, summarised (:data:`routes.LOCALS`)."""
        return self.call("GET", routes.locals_of(index))

    def evaluate(self, code: str, frame: int = 0, timeout: float = 30.0) -> dict[str, Any]:
        """Run ``code`` in frame ``frame`` as a notebook cell: the cell's answer."""
        return self.call("POST", routes.EVALUATE, {"code": code, "frame": frame,
                                                   "timeout": timeout}, timeout=timeout + 10)

    def read_file(self, path: str, start: int | None = None,
                  end: int | None = None) -> dict[str, Any]:
        """A text file of the workspace (``path`` relative to it), lines ``start..end``."""
        query = {"path": path, **{k: str(v) for k, v in (("start", start), ("end", end))
                                  if v is not None}}
        return self.call("GET", f"{routes.WORKSPACE_FILE}?{urlencode(query)}")

    def search(self, pattern: str, glob: str | None = None) -> dict[str, Any]:
        """Lines of the workspace's text files that match the regular expression."""
        query = {"pattern": pattern, **({"glob": glob} if glob else {})}
        return self.call("GET", f"{routes.WORKSPACE_SEARCH}?{urlencode(query)}")

    def edits(self) -> dict[str, Any]:
        """The edits since the session opened, as a unified diff."""
        return self.call("GET", routes.EDITS)

    def call(self, method: str, path: str, body: Any = None,
             timeout: float | None = None) -> dict[str, Any]:
        """Any call: its JSON answer, or the :class:`ControlError` it means."""
        return _checked(*self._request(method, path, body, timeout=timeout))

    def streamed(self, path: str, body: Any, printed: Callable[[dict[str, Any]], None],
                 timeout: float | None = None) -> dict[str, Any]:
        """``POST`` a call whose answer is JSON lines: ``{"output": ...}`` for each print,
        given to ``printed`` as it comes, then ``{"result": ...}``, returned."""
        with self._exchange("POST", path, body, True, timeout) as response:
            if response.status >= 400:
                _checked(response.status, _json_object(self._read(response.read)))
            while line := self._read(response.readline):
                data = self._line(line)
                if "output" in data:
                    printed(data["output"])
                elif "result" in data:
                    return dict(data["result"])
        raise self._unreachable("its answer ended before the result")

    # -- the wire --------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, auth: bool = True,
                 timeout: float | None = None) -> tuple[int, dict[str, Any]]:
        with self._exchange(method, path, body, auth, timeout) as response:
            return response.status, _json_object(self._read(response.read))

    def _exchange(self, method: str, path: str, body: Any, auth: bool,
                  timeout: float | None) -> _Exchange:
        headers = {"Accept": "application/json", **self._headers}
        if auth:
            headers["Authorization"] = f"Bearer {self._token}"
        payload = None
        if body is not None:
            payload = json.dumps(body)
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self._host, self._port,
                                          timeout=timeout or self._timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            return _Exchange(conn, conn.getresponse())
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self._unreachable(f"{type(exc).__name__}: {exc}") from None

    def _read(self, read: Callable[[], bytes]) -> bytes:
        try:
            return read()
        except (OSError, http.client.HTTPException) as exc:  # broken off, too
            raise self._unreachable(f"{type(exc).__name__}: {exc}") from None

    def _line(self, line: bytes) -> dict[str, Any]:
        try:
            data = json.loads(line)
        except ValueError:
            raise self._unreachable(f"its answer is not JSON lines: {line[:80]!r}") from None
        return data if isinstance(data, dict) else {}

    def _unreachable(self, why: str) -> ControlUnreachable:
        return ControlUnreachable(
            f"the session's control API at {self.url} does not answer ({why})", why)


class _Exchange:
    """One request's connection and response, closed together."""

    def __init__(self, conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.response = response

    def __enter__(self) -> http.client.HTTPResponse:
        return self.response

    def __exit__(self, *_: object) -> None:
        self.conn.close()


def _checked(status: int, data: dict[str, Any]) -> dict[str, Any]:
    error = refusal(status, data)
    if error is not None:
        raise error
    return data


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {"error": raw[:200].decode("utf-8", "replace")}
    return data if isinstance(data, dict) else {"value": data}
