"""``print`` inside a cell goes to the cell; every other thread's output goes on as before.

While a cell runs, ``sys.stdout`` and ``sys.stderr`` are replaced by a :class:`Router`
that sends the writes of a thread running a cell to that cell's buffer and everything
else to the stream it replaced. A cell's two buffers share one :class:`Spool`: the first
:data:`~.outputs.MAX_PRINTED_BYTES` of what it prints are kept, the rest only counted,
so a cell that prints without end holds no more memory than that. The router is put in
place when the first cell of the process starts and taken away when the last one ends
(unless someone replaced it since).
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from interactive.doors.notebook.outputs import MAX_PRINTED_BYTES

_lock = threading.Lock()
_users = 0
_saved: dict[str, TextIO] = {}
_buffers: dict[tuple[int, str], Buffer] = {}
"""(thread ident, "stdout" or "stderr") → the buffer of the cell that thread runs."""

Listener = Callable[[str, str], None]
"""Told each write of a cell as it happens: ``(stream name, text)``."""


class Spool:
    """What a cell printed, as far as it is kept: the first ``limit`` bytes (UTF-8) of
    its writes, then only a count of the bytes left out (``dropped``)."""

    def __init__(self, limit: int = MAX_PRINTED_BYTES) -> None:
        self.room = limit
        self.dropped = 0

    def keep(self, text: str) -> str:
        """The part of ``text`` to keep (all of it while there is room)."""
        if not text:
            return text
        if text.isascii():  # the usual case, told in constant time: a char is a byte
            size = len(text)
            if size <= self.room:
                self.room -= size
                return text
            kept = text[:self.room]
        else:
            raw = text.encode("utf-8", "surrogatepass")
            size = len(raw)
            if size <= self.room:
                self.room -= size
                return text
            kept = raw[:self.room].decode("utf-8", "ignore")  # no half character
        self.room = 0  # full: what comes later is not kept either (the head stays whole)
        self.dropped += size - len(kept.encode("utf-8", "surrogatepass"))
        return kept


class Buffer(io.TextIOBase):
    """A cell's output to one stream, kept as far as its spool allows, and told whole to
    its listener as it is written."""

    def __init__(self, name: str, listener: Listener | None, spool: Spool) -> None:
        super().__init__()
        self.name_, self.listener, self.spool = name, listener, spool
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        kept = self.spool.keep(text)
        if kept:
            self._parts.append(kept)
        if self.listener is not None and text:
            self.listener(self.name_, text)
        return len(text)

    def writable(self) -> bool:
        return True

    def getvalue(self) -> str:
        """What was kept of the writes."""
        return "".join(self._parts)


class Router(io.TextIOBase):
    """Writes of a cell's thread to its buffer; the rest to the stream it stands for."""

    def __init__(self, name: str, target: TextIO) -> None:
        super().__init__()
        self.name_ = name
        self.target = target

    def _own(self) -> Buffer | None:
        return _buffers.get((threading.get_ident(), self.name_))

    def write(self, text: str) -> int:
        own = self._own()
        return own.write(text) if own is not None else self.target.write(text)

    def flush(self) -> None:
        if self._own() is None:
            self.target.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False if self._own() is not None else self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", "utf-8") or "utf-8"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


def _install() -> None:
    global _users
    with _lock:
        if _users == 0:
            for name in ("stdout", "stderr"):
                _saved[name] = getattr(sys, name)
                setattr(sys, name, Router(name, _saved[name]))
        _users += 1


def _uninstall() -> None:
    global _users
    with _lock:
        _users -= 1
        if _users == 0:
            for name, original in _saved.items():
                if isinstance(getattr(sys, name), Router):  # not replaced by someone since
                    setattr(sys, name, original)
            _saved.clear()


@contextlib.contextmanager
def captured(listener: Listener | None = None) -> Iterator[tuple[Buffer, Buffer]]:
    """While inside, what the calling thread prints goes into the two buffers yielded
    (stdout, stderr; one spool), and to ``listener`` as it is written; other threads
    print where they did."""
    ident = threading.get_ident()
    spool = Spool()
    out, err = Buffer("stdout", listener, spool), Buffer("stderr", listener, spool)
    _buffers[(ident, "stdout")], _buffers[(ident, "stderr")] = out, err
    _install()
    try:
        yield out, err
    finally:
        _uninstall()
        _buffers.pop((ident, "stdout"), None)
        _buffers.pop((ident, "stderr"), None)
