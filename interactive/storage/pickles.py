"""Pickles with out-of-band buffers, laid out on 64-byte boundaries: one format, two users.

Pickle protocol 5 hands large contiguous buffers (NumPy arrays, PyTorch storages,
``bytearray``) to a callback instead of copying them into the pickle. Here they are
written raw, one after the other, each starting on a 64-byte boundary counted from a
given start, so that arrays loaded from the bytes (or a map of the file) are aligned;
loading takes views into one buffer, without a copy.

- A capture (:mod:`interactive.inputs.capture`): the buffers in ``buffers.bin`` from
  offset 0, their ``[offset, length]`` spans in its manifest.
- A cached output (:mod:`interactive.storage.outputs`): a header, then the pickle and
  its buffers, aligned from the start of the entry.

Layout, for parts ``p0, p1, ...`` placed from ``start``: zero bytes up to the next
multiple of 64, ``p0``, zero bytes up to the next multiple of 64, ``p1``, ... (no
padding after the last part).
"""

from __future__ import annotations

import io
import logging
import mmap
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

ALIGN = 64
"""Every part starts on a multiple of this (counted from the container's start)."""
PROTOCOL = 5
Chunk = bytes | bytearray | memoryview
Span = tuple[int, int]
"""Where a part lies: ``(offset, length)``."""
BufferCallback = Callable[[pickle.PickleBuffer], Any]
Dumper = Callable[[Any, BufferCallback], bytes]
"""A ``dumps(value, buffer_callback)`` (such as one that puts torch storages out of band)."""


class Truncated(ValueError):
    """The bytes end before a part that their description places there."""


def dumps(value: Any, buffers: list[pickle.PickleBuffer], dumper: Dumper | None = None) -> bytes:
    """Pickle ``value``, appending its out-of-band buffers to ``buffers`` (none of them
    when pickling fails)."""
    start = len(buffers)
    try:
        if dumper is not None:
            return dumper(value, buffers.append)
        return pickle.dumps(value, protocol=PROTOCOL, buffer_callback=buffers.append)
    except BaseException:
        del buffers[start:]
        shipping = _shipping_dumps() if dumper is None else None
        if shipping is None:
            raise
    try:  # a class of the driver's __main__, shipped by value: pickled by value again
        return shipping(value, protocol=PROTOCOL, buffer_callback=buffers.append)
    except BaseException:
        del buffers[start:]
        raise


def _shipping_dumps() -> Callable[..., bytes] | None:
    """Ray's cloudpickle, in a process connected to Ray: there a task's classes and
    functions may come from the driver's ``__main__`` by value, which plain pickle cannot
    name (loading needs Ray importable, as it is where the task runs again)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    dumps: Callable[..., bytes] = ray.cloudpickle.dumps
    return dumps


def loads(data: Chunk, buffers: Iterable[Any] = ()) -> Any:
    """Unpickle ``data`` with its out-of-band ``buffers`` (podcode's own files only)."""
    return pickle.loads(data, buffers=buffers)  # noqa: S301 - written by podcode


def place(lengths: Iterable[int], start: int = 0) -> list[Span]:
    """Where parts of ``lengths`` go when laid out from offset ``start``."""
    spans: list[Span] = []
    offset = start
    for length in lengths:
        offset += -offset % ALIGN
        spans.append((offset, length))
        offset += length
    return spans


def end_of(spans: Sequence[Span], start: int = 0) -> int:
    """The offset just after the last part (``start`` when there is none)."""
    return spans[-1][0] + spans[-1][1] if spans else start


def lay_out(parts: Sequence[Chunk], start: int = 0) -> tuple[list[Chunk], list[Span]]:
    """The chunks to write one after the other from offset ``start`` (padding, part,
    padding, part...), and each part's span."""
    views = [memoryview(part).cast("B") for part in parts]
    spans = place((view.nbytes for view in views), start)
    chunks: list[Chunk] = []
    offset = start
    for view, (at, length) in zip(views, spans, strict=True):
        chunks.append(bytes(at - offset))
        chunks.append(view)
        offset = at + length
    return chunks, spans


def write_parts(out: BinaryIO, parts: Sequence[Chunk]) -> list[Span]:
    """Write ``parts`` aligned from the current start of ``out`` (offset 0); their spans."""
    chunks, spans = lay_out(parts)
    for chunk in chunks:
        if len(chunk):
            out.write(chunk)
    return spans


def raw_buffers(buffers: Iterable[pickle.PickleBuffer]) -> list[memoryview]:
    """The bytes of each out-of-band buffer (raises BufferError for a non-contiguous one)."""
    return [buffer.raw() for buffer in buffers]


def views(data: Chunk, spans: Iterable[Sequence[int]]) -> list[memoryview]:
    """The parts at ``spans`` as views into ``data``; :class:`Truncated` if one is cut off."""
    whole = memoryview(data).cast("B")
    parts = []
    for offset, length in spans:
        if offset < 0 or length < 0 or offset + length > whole.nbytes:
            raise Truncated(f"{whole.nbytes} bytes, but a part lies at {offset}..{offset + length}")
        parts.append(whole[offset : offset + length])
    return parts


def map_file(path: Path) -> memoryview:
    """The file mapped copy-on-write: writable, private to this process, sharing the page
    cache's pages until written. Read into memory where it cannot be mapped."""
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return memoryview(bytearray())
        try:
            return memoryview(mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY))
        except (OSError, ValueError) as exc:
            log.debug("cannot map %s (%s); reading it", path, exc)
            return _read_whole(handle, size)


def _read_whole(handle: io.FileIO, size: int) -> memoryview:
    """The whole file in writable memory, read once (no zero-filling pass first); shorter
    when the file shrank meanwhile."""
    view = _uninitialized(size)
    done = 0
    while done < size:
        count = handle.readinto(view[done:])
        if not count:
            return view[:done]
        done += count
    return view


def _uninitialized(size: int) -> memoryview:
    """Writable memory that is not zero-filled first: NumPy's allocator when it is there
    (it asks for huge pages, so reading in is about twice as fast), else an anonymous map."""
    try:
        import numpy
    except ImportError:
        return memoryview(mmap.mmap(-1, size))
    return numpy.empty(size, dtype=numpy.uint8).data.cast("B")
