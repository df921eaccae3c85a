"""A gzip stream inflated on a thread of its own, for one forward read.

Extracting a tarball as it downloads is three kinds of work: reading the network,
inflating, and creating files. zlib lets go of the interpreter while it inflates,
so a thread that reads and inflates ahead keeps a second core busy while the
extraction creates files on the first (one pass, at the speed of the slower).
The reader offers what tarfile needs of a file: ``read``, ``tell`` and forward
``seek``.
"""

from __future__ import annotations

import queue
import threading
import zlib
from typing import Protocol

CHUNK_BYTES = 1 << 20
AHEAD_CHUNKS = 16
"""Inflated chunks held ahead of the reader (bounded memory, a few tens of MiB at most)."""
_GZIP = 16 + zlib.MAX_WBITS


class Readable(Protocol):
    """What is read from: a file, a download."""

    def read(self, size: int = ...) -> bytes: ...


class Inflating:
    """The inflated bytes of the gzip stream ``stream`` (``first`` already read from it).

    Errors of the thread (the network's, corrupt data) are raised by :meth:`read`.
    :meth:`close` stops the thread; after a read to the end it has read ``stream``
    to its end too."""

    def __init__(self, stream: Readable, first: bytes = b"") -> None:
        self._chunks: queue.Queue[bytes | BaseException] = queue.Queue(AHEAD_CHUNKS)
        self._stop = threading.Event()
        self._buffer = memoryview(b"")
        self._position = 0
        self._ended = False
        self._thread = threading.Thread(target=self._inflate, args=(stream, first),
                                        name="podcode-inflate", daemon=True)
        self._thread.start()

    def _inflate(self, stream: Readable, first: bytes) -> None:
        try:
            inflater, started = zlib.decompressobj(_GZIP), False
            data = first or stream.read(CHUNK_BYTES)
            while data and not self._stop.is_set():
                while data:  # a gzip file may hold several members back to back
                    inflated = inflater.decompress(data)
                    started = True
                    if inflated:  # an empty chunk is the end, for the reader
                        self._put(inflated)
                    if not inflater.eof:
                        break
                    data, inflater, started = inflater.unused_data, zlib.decompressobj(_GZIP), False
                data = stream.read(CHUNK_BYTES)
            if started and not inflater.eof and not self._stop.is_set():
                raise EOFError("the gzip stream ended before its end marker")
            self._put(b"")
        except BaseException as exc:  # handed to the reader, which raises it
            self._put(exc)

    def _put(self, item: bytes | BaseException) -> None:
        while not self._stop.is_set():
            try:
                self._chunks.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _next(self) -> bool:
        """Take the next inflated chunk; False at the end."""
        while not self._ended:
            item = self._chunks.get()
            if isinstance(item, BaseException):
                self._ended = True
                raise item
            if not item:
                self._ended = True
                return False
            self._buffer = memoryview(item)
            return True
        return False

    def read(self, size: int = -1) -> bytes:
        parts: list[bytes] = []
        wanted = size if size >= 0 else -1
        while wanted != 0:
            if not self._buffer and not self._next():
                break
            take = len(self._buffer) if wanted < 0 else min(wanted, len(self._buffer))
            parts.append(bytes(self._buffer[:take]))
            self._buffer = self._buffer[take:]
            self._position += take
            if wanted > 0:
                wanted -= take
        return b"".join(parts)

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        """Forward only (from the start or from here), by reading."""
        target = offset if whence == 0 else self._position + offset
        if whence not in (0, 1) or target < self._position:
            raise OSError("an inflating stream only seeks forward")
        while self._position < target:
            if not self.read(min(target - self._position, CHUNK_BYTES)):
                raise EOFError("the stream ended before the position sought")
        return self._position

    def close(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._chunks.get(timeout=0.1)
            except queue.Empty:
                continue
        self._thread.join()

    def drain(self) -> None:
        """Read to the end (the thread then has read its stream to the end), then close."""
        while self.read(CHUNK_BYTES):
            pass
        self.close()
