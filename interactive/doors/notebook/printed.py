"""A running cell's prints, sent to the IDE as they happen (``"stream": true`` on
``POST /api/notebook/execute``).

The answer is newline-delimited JSON (``application/x-ndjson``): a line
``{"output": {"type": "stream", "name", "text"}}`` for what the cell printed since the last
one (at most every :data:`BATCH_SECONDS`, so that a loop that prints on every step is not
a line per print), then ``{"result": {...}}``, the cell's whole answer as without
streaming (its outputs hold everything it printed: the IDE replaces what it showed
meanwhile). Prints are streamed up to :data:`MAX_STREAMED_CHARS`; the rest shows in
the result.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from interactive.doors.notebook import outputs

BATCH_SECONDS = 0.1
MAX_STREAMED_CHARS = outputs.MAX_TEXT_CHARS


class Printed:
    """What a running cell printed and the IDE has not been sent yet: filled on the cell's
    thread (never blocking it), taken on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[str, str]] = []
        self._kept = 0
        self.ready = asyncio.Event()

    def __call__(self, name: str, text: str) -> None:
        """A write of the cell (on its thread)."""
        with self._lock:
            room = MAX_STREAMED_CHARS - self._kept
            if room <= 0:
                return
            self._pending.append((name, text[:room]))
            self._kept += min(len(text), room)
            first = len(self._pending) == 1
        if first:
            self._loop.call_soon_threadsafe(self.ready.set)

    def take(self) -> list[outputs.Output]:
        """What was printed since the last call, consecutive writes to one stream merged."""
        with self._lock:
            pending, self._pending = self._pending, []
            self.ready.clear()
        merged: list[list[str]] = []
        for name, text in pending:
            if merged and merged[-1][0] == name:
                merged[-1][1] += text
            else:
                merged.append([name, text])
        return [outputs.stream(name, text) for name, text in merged]


def line(kind: str, value: Any) -> bytes:
    return json.dumps({kind: value}).encode() + b"\n"


async def stream(request: web.Request, running: asyncio.Future[Any], printed: Printed,
                 touch: Callable[[], None], touch_seconds: float) -> web.StreamResponse:
    """Send ``printed`` as it comes while ``running`` runs, ``touch()`` at least every
    ``touch_seconds``, then the cell's result. A client that goes away leaves the cell
    running (the stop button interrupts it)."""
    loop = asyncio.get_running_loop()
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    touched = loop.time()
    try:
        while not running.done():
            ready = asyncio.ensure_future(printed.ready.wait())
            await asyncio.wait({running, ready}, timeout=touch_seconds,
                               return_when=asyncio.FIRST_COMPLETED)
            ready.cancel()
            if printed.ready.is_set() and not running.done():
                await asyncio.wait({running}, timeout=BATCH_SECONDS)  # more of it, at once
            if not running.done():  # else the result holds it all
                for output in printed.take():
                    await response.write(line("output", output))
            if loop.time() - touched >= touch_seconds:
                touch()
                touched = loop.time()
        await response.write(line("result", running.result().as_dict()))
        await response.write_eof()
    except ConnectionResetError:
        pass
    return response
