"""The output cache: a task's return value stored under its name, version and inputs.

An entry lives at ``cache/<task>/<digest>.pkl`` in the store, where the digest
covers the task's qualified name, ``cache_version`` and
:func:`interactive.hashing.hash_inputs` of the call. An entry is a small header
(magic, length, SHA-256 of the payload) followed by the pickled value, written
atomically; an entry that is truncated, corrupt or cannot be unpickled (a class
was renamed, say) is a miss, logged as a warning, and is overwritten by the
next successful call.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import pickle
import struct
from collections.abc import Callable
from typing import Any

from interactive.checkpoint import folder_name
from interactive.hashing import hash_inputs
from interactive.store import Store, StoreError

logger = logging.getLogger(__name__)

CACHE = "cache"
"""Top folder of cached outputs in the store."""
MAGIC = b"PODCODE-CACHE\x01"
_HEADER = struct.Struct("<Q32s")
"""Payload length, SHA-256 of the payload."""
KEY_FORMAT = b"podcode-cache-key/1"


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


def encode_entry(payload: bytes) -> bytes:
    return MAGIC + _HEADER.pack(len(payload), hashlib.sha256(payload).digest()) + payload


def decode_entry(data: bytes) -> bytes:
    """The payload of a whole entry; raises CorruptEntry otherwise."""
    start = len(MAGIC) + _HEADER.size
    if len(data) < start or not data.startswith(MAGIC):
        raise CorruptEntry("not a podcode cache entry (bad or missing header)")
    length, digest = _HEADER.unpack_from(data, len(MAGIC))
    payload = data[start:]
    if len(payload) != length:
        raise CorruptEntry(f"truncated: {len(payload)} of {length} bytes")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptEntry("checksum mismatch")
    return payload


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
    ) -> str:
        """``<task folder>/<digest>``; raises UnhashableInput for an input it cannot hash.

        With ``func``, the call is first bound to its signature (defaults applied),
        so the same call spelled differently gets the same key.
        """
        names: list[str] = []
        if func is not None:
            args, kwargs, names = canonical_call(func, args, kwargs)
        inputs = hash_inputs(args, kwargs, names=names)
        digest = hashlib.sha256(KEY_FORMAT)
        for part in (task, str(version), inputs):
            digest.update(struct.pack("<Q", len(part.encode())) + part.encode())
        return f"{folder_name(task)}/{digest.hexdigest()}"

    def path(self, key: str) -> str:
        """The entry's path relative to the store's root."""
        return f"{CACHE}/{key}.pkl"

    def get(self, key: str) -> tuple[bool, object]:
        """``(True, value)`` for a whole entry, ``(False, None)`` otherwise."""
        where = self.store.url_for(self.path(key))
        try:
            data = self.store.get_bytes(self.path(key))
        except StoreError as exc:
            logger.warning("cache miss: cannot read %s: %s", where, exc)
            return False, None
        if data is None:
            logger.debug("cache miss: no entry at %s", where)
            return False, None
        try:
            return True, pickle.loads(decode_entry(data))  # noqa: S301 - our own entries
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
        try:
            payload = pickle.dumps(value, protocol=5)
        except Exception as exc:
            logger.warning(
                "not cached: the output (type %s) cannot be pickled: %s: %s",
                type(value).__qualname__,
                type(exc).__name__,
                exc,
            )
            return
        try:
            self.store.put_bytes(self.path(key), encode_entry(payload))
        except StoreError as exc:
            logger.warning("not cached: %s", exc)
            return
        logger.info("output cached at %s", where)
