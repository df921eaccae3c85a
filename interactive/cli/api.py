"""A small client for a session's control API (blocking, for the CLI)."""

from __future__ import annotations

import base64
import http.client
import json
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from interactive.cli.errors import (
    ControlBadRequest,
    ControlConflict,
    ControlError,
    ControlUnauthorized,
    ControlUnreachable,
)


class ControlClient:
    """``GET /api/status``, ``POST /api/resume``... with the session's bearer token."""

    def __init__(self, url: str, token: str, timeout: float = 15.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ControlError(f"the session's control_url {url!r} is not http://host:port")
        self.url = url
        self._host = parts.hostname
        self._port = parts.port or 80
        self._token = token
        self._timeout = timeout

    def healthz(self) -> bool:
        try:
            status, _ = self._request("GET", "/healthz", auth=False)
        except ControlError:
            return False
        return status == 200

    def status(self) -> dict[str, Any]:
        return self._checked("GET", "/api/status")

    def resume(self) -> dict[str, Any]:
        return self._checked("POST", "/api/resume", {})

    def keepalive(self, seconds: float) -> dict[str, Any]:
        return self._checked("POST", "/api/keepalive", {"seconds": seconds})

    def abort(self) -> dict[str, Any]:
        return self._checked("POST", "/api/abort", {})

    def push_files(self, files: dict[str, bytes]) -> dict[str, Any]:
        """Write ``files`` (path relative to the workspace -> content) in the session."""
        encoded = {name: base64.b64encode(data).decode() for name, data in files.items()}
        return self._checked("POST", "/api/files", {"files": encoded})

    def push_ssh_key(self, key: str) -> dict[str, Any]:
        """Have the session's SSH endpoint accept the public ``key`` (one line)."""
        return self._checked("POST", "/api/ssh-key", {"key": key})

    def login_link(self, ide_url: str) -> str | None:
        """A link that logs a browser in to code-server at ``ide_url`` once, without the
        password (None: the session gives none, as sessions before links did)."""
        status, data = self._request("POST", "/api/login-link", {})
        nonce = data.get("nonce")
        if status >= 400 or not isinstance(nonce, str):
            return None
        return f"{self.url.rstrip('/')}/login/{quote(nonce)}?{urlencode({'ide': ide_url})}"

    def _checked(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        status, data = self._request(method, path, body)
        if status < 400:
            return data
        reason = str(data.get("error") or f"HTTP {status}")
        if status == 401:
            raise ControlUnauthorized(
                "the session refused the token (401): the session file is stale, the session "
                "may have restarted; try again", status,
            )
        if status == 409:
            raise ControlConflict(reason, status)
        if status == 400:
            raise ControlBadRequest(f"the session rejected the request: {reason}", status)
        raise ControlError(f"the session's control API failed ({status}): {reason}", status)

    def _request(self, method: str, path: str, body: Any = None,
                 auth: bool = True) -> tuple[int, dict[str, Any]]:
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self._token}"
        payload = None
        if body is not None:
            payload = json.dumps(body)
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ControlUnreachable(
                f"the session's control API at {self.url} does not answer "
                f"({type(exc).__name__}: {exc})"
            ) from None
        finally:
            conn.close()
        return response.status, _json_object(raw)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {"error": raw[:200].decode("utf-8", "replace")}
    return data if isinstance(data, dict) else {"value": data}
