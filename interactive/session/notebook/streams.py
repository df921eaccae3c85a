"""``print`` inside a cell goes to the cell; every other thread's output goes on as before.

While a cell runs, ``sys.stdout`` and ``sys.stderr`` are replaced by a :class:`Router`
that sends the writes of a thread running a cell to that cell's buffer and everything
else to the stream it replaced. The router is put in place when the first cell of the
process starts and taken away when the last one ends (unless someone replaced it since).
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

_lock = threading.Lock()
_users = 0
_saved: dict[str, TextIO] = {}
_buffers: dict[tuple[int, str], io.StringIO] = {}
"""(thread ident, "stdout" or "stderr") → the buffer of the cell that thread runs."""

Listener = Callable[[str, str], None]
"""Told each write of a cell as it happens: ``(stream name, text)``."""


class Buffer(io.StringIO):
    """A cell's output, kept, and told to its listener as it is written."""

    def __init__(self, name: str, listener: Listener | None) -> None:
        super().__init__()
        self.name_, self.listener = name, listener

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.listener is not None and text:
            self.listener(self.name_, text)
        return written


class Router(io.TextIOBase):
    """Writes of a cell's thread to its buffer; the rest to the stream it stands for."""

    def __init__(self, name: str, target: TextIO) -> None:
        super().__init__()
        self.name_ = name
        self.target = target

    def _own(self) -> io.StringIO | None:
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
def captured(listener: Listener | None = None) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """While inside, what the calling thread prints goes into the two buffers yielded
    (stdout, stderr), and to ``listener`` as it is written; other threads print where
    they did."""
    ident = threading.get_ident()
    out, err = Buffer("stdout", listener), Buffer("stderr", listener)
    _buffers[(ident, "stdout")], _buffers[(ident, "stderr")] = out, err
    _install()
    try:
        yield out, err
    finally:
        _uninstall()
        _buffers.pop((ident, "stdout"), None)
        _buffers.pop((ident, "stderr"), None)
