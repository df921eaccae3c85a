"""The output cache: a task's return value stored under its name, version and inputs.

An entry lives at ``cache/<task>/<digest>.pkl`` in the store, where the digest
covers the task's name (where it lives: ``module.qualname`` or ``script.py:qualname``),
``cache_version``, a fingerprint of the task's own code and
:func:`interactive.storage.hashing.hash_inputs` of the call. An entry is a small header
(magic, part lengths, a CRC-32) followed by the pickled value and its
out-of-band buffers (pickle protocol 5: large arrays are written and read
without extra copies), written atomically. An entry that is truncated, corrupt
or cannot be unpickled (a class was renamed, say) is a miss, logged as a
warning, and is overwritten by the next successful call.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import pickle
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from interactive.base.names import folder_name
from interactive.storage import pickles
from interactive.storage.hashing import FORMAT, code_fingerprint, hash_inputs
from interactive.storage.store import Chunk, Store, StoreError

logger = logging.getLogger(__name__)

CACHE = "cache"
"""Top folder of cached outputs in the store."""
MAGIC = b"PODCODE-CACHE\x01"
MAX_PARTS = 1 << 20
KEY_FORMAT = b"podcode-cache-key/3:" + FORMAT
"""The key's layout and the input hash's algorithm are part of every key: a new one makes
old entries misses (version 3 added the task's code fingerprint)."""


class CorruptEntry(Exception):
    """A cache entry's bytes are not a whole, valid entry."""


def canonical_call(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], list[str]]:
    """Bind the call to ``func``'s signature with defaults applied.

    ``f(1)``, ``f(1, b=2)`` and ``f(a=1, b=2)`` (with ``b=2`` the default) then
    hash alike. Returns (positional-only values, the rest by name, their names).
    """
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs, []
    bound.apply_defaults()
    positional: list[Any] = []
    named: dict[str, Any] = {}
    names: list[str] = []
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append(value)
            names.append(name)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
            names.extend(f"{name}[{i}]" for i in range(len(value)))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return tuple(positional), named, names


def encode_entry(parts: Sequence[Chunk]) -> list[Chunk]:
    """The chunks of an entry holding ``parts`` (the pickle, then its out-of-band buffers).

    Layout: magic, part count, part lengths, CRC-32 of the count, lengths and
    parts; then the parts as :mod:`interactive.storage.pickles` lays them out from the
    entry's start (each on a 64-byte boundary: aligned arrays). The CRC catches damage
    (the lengths catch truncation); entries are not protected against someone who can
    write the store.
    """
    views = [memoryview(part).cast("B") for part in parts]
    lengths = struct.pack(f"<Q{len(views)}Q", len(views), *(view.nbytes for view in views))
    header: list[Chunk] = [MAGIC, lengths, struct.pack("<Q", _crc(lengths, views))]
    body, _ = pickles.lay_out(views, start=sum(len(chunk) for chunk in header))
    return header + body


def decode_entry(data: Chunk) -> list[memoryview]:
    """The parts of a whole entry (views into ``data``); raises CorruptEntry otherwise."""
    view = memoryview(data).cast("B")
    if view[: len(MAGIC)] != MAGIC or len(view) < len(MAGIC) + 8:
        raise CorruptEntry("not a podcode cache entry (bad or missing header)")
    (count,) = struct.unpack_from("<Q", view, len(MAGIC))
    start = len(MAGIC) + 8 * (count + 1)
    if count > MAX_PARTS or len(view) < start + 8:
        raise CorruptEntry("truncated or damaged header")
    lengths = struct.unpack_from(f"<{count}Q", view, len(MAGIC) + 8)
    spans = pickles.place(lengths, start + 8)
    end = pickles.end_of(spans, start + 8)
    if end != len(view):
        raise CorruptEntry(f"{len(view)} bytes where the header announces {end}")
    parts = pickles.views(view, spans)
    if struct.unpack_from("<Q", view, start)[0] != _crc(view[len(MAGIC) : start], parts):
        raise CorruptEntry("checksum mismatch")
    return parts


def _crc(header: Chunk, parts: Sequence[memoryview]) -> int:
    crc = zlib.crc32(header)
    for part in parts:
        crc = zlib.crc32(part, crc)
    return crc


class TaskCache:
    """Outputs of successful calls, in a store shared by every pod of the workflow."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def key(
        self,
        task: str,
        version: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        func: Callable[..., Any] | None = None,
        inputs: str | None = None,
    ) -> str:
        """``<task folder>/<digest>``; raises UnhashableInput for an input it cannot hash.

        The digest covers the task's name (where it lives), ``version``, the inputs and,
        with ``func``, a fingerprint of the task's own code (editing the task makes its
        old entries misses; its upstreams' stay valid). With ``func``, the call is also
        bound to its signature first (defaults applied), so the same call spelled
        differently gets the same key. ``inputs``: :meth:`inputs_digest` of the call,
        computed earlier (the arguments may have changed since).
        """
        if inputs is None:
            inputs = self.inputs_digest(args, kwargs, func=func)
        code = code_fingerprint(func) if func is not None else ""
        digest = hashlib.sha256(KEY_FORMAT)
        for part in (task, str(version), code, inputs):
            digest.update(struct.pack("<Q", len(part.encode())) + part.encode())
        return f"{folder_name(task)}/{digest.hexdigest()}"

    @staticmethod
    def inputs_digest(
        args: tuple[Any, ...], kwargs: dict[str, Any], *, func: Callable[..., Any] | None = None
    ) -> str:
        """The part of a key that the call's arguments make."""
        names: list[str] = []
        if func is not None:
            args, kwargs, names = canonical_call(func, args, kwargs)
        return hash_inputs(args, kwargs, names=names)

    def path(self, key: str) -> str:
        """The entry's path relative to the store's root."""
        return f"{CACHE}/{key}.pkl"

    def get(self, key: str) -> tuple[bool, object]:
        """``(True, value)`` for a whole entry, ``(False, None)`` otherwise."""
        where = self.store.url_for(self.path(key))
        try:
            data = self.store.get_buffer(self.path(key))
        except StoreError as exc:
            logger.warning("cache miss: cannot read %s: %s", where, exc)
            return False, None
        if data is None:
            logger.debug("cache miss: no entry at %s", where)
            return False, None
        try:
            pickle_part, *buffers = decode_entry(data)
            return True, pickles.loads(pickle_part, buffers)
        except CorruptEntry as exc:
            logger.warning("cache miss: entry %s is corrupt (%s); it will be replaced", where, exc)
        except Exception as exc:
            logger.warning(
                "cache miss: entry %s cannot be loaded (%s: %s); it will be replaced",
                where,
                type(exc).__name__,
                exc,
            )
        return False, None

    def put(self, key: str, value: object) -> None:
        """Store ``value`` atomically; a value that cannot be pickled is logged and skipped.

        A store that cannot be written is logged too: the task succeeded, and a
        missing cache entry only means the next run computes it again.
        """
        where = self.store.url_for(self.path(key))
        buffers: list[pickle.PickleBuffer] = []
        try:
            payload = pickles.dumps(value, buffers)
            parts: list[Chunk] = [payload, *pickles.raw_buffers(buffers)]
        except Exception as exc:
            logger.warning(
                "not cached: the output (type %s) cannot be pickled: %s: %s",
                type(value).__qualname__,
                type(exc).__name__,
                exc,
            )
            return
        try:
            self.store.put_chunks(self.path(key), encode_entry(parts), durable=False)
        except StoreError as exc:
            logger.warning("not cached: %s", exc)
            return
        logger.info("output cached at %s", where)
