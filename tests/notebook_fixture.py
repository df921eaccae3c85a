"""The session as the notebook's routes see it: a fake host, and a failure to serve
(``_failing`` raised ``ValueError`` with ``total = 12`` and ``rows = [5, 7]`` in its frame)."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interactive.base.phases import Phase
from interactive.base.settings import Settings
from interactive.base.state import SessionState
from interactive.base.types import ExcInfo, TaskRef
from interactive.storage.workspace import Snapshot


def _failing(rows: list[int]) -> None:
    total = sum(rows)
    raise ValueError(f"total too large: {total}")


def failure_of_failing() -> ExcInfo:
    try:
        _failing([5, 7])
    except ValueError:
        kind, exc, tb = sys.exc_info()
        assert kind is not None and exc is not None
        return kind, exc, tb
    raise AssertionError("no failure")


class Host:
    """The session as the notebook sees it."""

    def __init__(self, root: Path) -> None:
        self.state = SessionState("jobs.train", clock=lambda: 1000.0)
        self.state.set(state=Phase.WAITING, error="ValueError: total too large: 12")
        self.task = TaskRef("jobs.train", "jobs", "train", str(Path(__file__)))
        self.workspace = self.config_root = root
        self.home = root / "home"
        self.id = "41-7"
        self.capture = None
        self.peers = None
        self.settings = Settings()
        self.snapshot: Snapshot | None = Snapshot.take(root)
        self.resumed = 0

    def resume(self, peer: bool = False) -> dict[str, Any] | None:
        self.resumed += 1
        return {"patched": []}

    def abort(self, peer: bool = False) -> None: ...

    def keepalive(self, seconds: float) -> float | None:
        return None

    def peer_status(self) -> dict[str, Any]:
        return {}


GATE = threading.Event()
"""A cell can wait on it (``import tests.notebook_fixture``): the test opens it."""


FIRST_PRINT = {"type": "stream", "name": "stdout", "text": "first\n"}


@contextlib.contextmanager
def dying_session() -> Iterator[str]:
    """The URL of a control API that answers one streamed cell with its first print
    (:data:`FIRST_PRINT`) and then goes away, as a session whose process dies mid-answer."""
    line = json.dumps({"output": FIRST_PRINT}).encode() + b"\n"
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_then_die() -> None:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n")
                           if h.lower().startswith(b"content-length:")), 0)
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:  # read whole: the close is a close, not a reset
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n"
                         + b"%x\r\n%s\r\n" % (len(line), line))

    server = threading.Thread(target=answer_then_die, daemon=True)
    server.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        server.join(10)


HOLD = threading.Event()
"""A cell can block on it in native code (``HOLD.wait()`` releases the GIL, as
``time.sleep`` does); the test sets it to let the cell's thread end."""
