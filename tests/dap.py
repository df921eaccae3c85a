"""A small Debug Adapter Protocol client for driving a real debugpy in tests."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from typing import Any


class DapClient:
    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.timeout = timeout
        self.seq = 0
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.backlog: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                header, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line
                        for line in header.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ).split(b":")[1]
                )
                while len(buffer) < length:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                body, buffer = buffer[:length], buffer[length:]
                self.messages.put(json.loads(body))
        except OSError:
            return

    def send(self, command: str, **arguments: Any) -> int:
        self.seq += 1
        body = json.dumps(
            {"seq": self.seq, "type": "request", "command": command, "arguments": arguments}
        ).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def _next(self, match: Any) -> dict[str, Any]:
        for index, message in enumerate(self.backlog):
            if match(message):
                return self.backlog.pop(index)
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching DAP message; backlog: {self.backlog[-5:]}")
            try:
                message = self.messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if match(message):
                return message
            self.backlog.append(message)

    def response(self, seq: int) -> dict[str, Any]:
        return self._next(lambda m: m.get("type") == "response" and m.get("request_seq") == seq)

    def event(self, name: str) -> dict[str, Any]:
        return self._next(lambda m: m.get("type") == "event" and m.get("event") == name)

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        response = self.response(self.send(command, **arguments))
        assert response["success"], response
        return response.get("body", {})

    def attach_and_stop(self) -> dict[str, Any]:
        """initialize → attach → setExceptionBreakpoints → configurationDone → stopped."""
        self.request(
            "initialize",
            adapterID="debugpy",
            clientID="podcode-tests",
            pathFormat="path",
            linesStartAt1=True,
            columnsStartAt1=True,
        )
        attach = self.send("attach", justMyCode=False)
        self.event("initialized")
        self.request("setExceptionBreakpoints", filters=["uncaught"])
        self.request("configurationDone")
        self.response(attach)
        return self.event("stopped")["body"]

    def frame_locals(self, thread_id: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
        frames = self.request("stackTrace", threadId=thread_id)["stackFrames"]
        scopes = self.request("scopes", frameId=frames[0]["id"])["scopes"]
        local = next(s for s in scopes if s["name"].lower().startswith("locals"))
        variables = self.request("variables", variablesReference=local["variablesReference"])[
            "variables"
        ]
        return frames, {v["name"]: v["value"] for v in variables}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send("disconnect", terminateDebuggee=False)
        self.sock.close()
        self._reader.join(timeout=5)
