"""Stable content hashes of a call's inputs, for the output cache.

The same inputs give the same hash in every process, on every machine: no
``hash()`` (salted per process for ``str``), no object ids, no pickle (whose
bytes depend on set order). Every value is written as a typed, length-prefixed
record into one BLAKE3 hash; large NumPy arrays feed their raw buffer without
copying, hashed on every core by BLAKE3 itself (its tree mode: the digest is the same
whatever the number of threads).

Rules (also in docs/fault-tolerance.md):

- Types count: ``1``, ``1.0`` and ``True`` hash differently; so do a list and
  a tuple with the same items, and a dataclass and a dict with its fields.
- Dicts, sets and frozensets hash without regard to order (like ``==``);
  keyword arguments likewise. Lists, tuples and ``OrderedDict`` keep order.
- ``pathlib`` paths hash by their text, not by the file's content: change
  ``cache_version`` (or pass the content or a version) when the file changes.
- NumPy arrays hash by dtype, shape and values (C order), whatever their
  strides; object arrays hash element by element.
- Objects of other classes hash only if they define ``__podcode_hash__(self)``
  returning ``bytes`` or ``str``; anything else raises :class:`UnhashableInput`
  naming the argument, never a wrong cache hit.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import fractions
import functools
import inspect
import math
import pathlib
import struct
import sys
import types
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from blake3 import blake3

from interactive.base.errors import PodcodeError

ALGORITHM = "blake3"
FORMAT = b"podcode-hash/2-" + ALGORITHM.encode()
"""Changes whenever the encoding or the algorithm changes, so old cache keys never collide."""
PARALLEL_BYTES = 1024 * 1024
"""Buffers from this size on are hashed on several threads (BLAKE3 decides how many)."""


class UnhashableInput(PodcodeError, TypeError):
    """An argument has no stable content hash, so its call cannot be cached."""

    def __init__(self, argument: str, type_name: str, reason: str) -> None:
        self.argument = argument
        self.type_name = type_name
        self.reason = reason
        super().__init__(
            f"argument {argument!r} (type {type_name}) cannot be hashed for the cache: {reason}. "
            "Pass plain data (numbers, strings, containers, dataclasses, NumPy arrays, paths), "
            "give the class a __podcode_hash__(self) -> bytes method, "
            "or turn the cache off for this task (cache=False)."
        )


class _Refused(Exception):
    """Raised inside the walk; turned into UnhashableInput with the argument's name."""

    def __init__(self, where: str, value: object, reason: str) -> None:
        super().__init__(reason)
        self.where = where
        self.value = value
        self.reason = reason


def type_name(value: object) -> str:
    kind = type(value)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def hash_inputs(
    args: tuple[Any, ...], kwargs: dict[str, Any], *, names: Sequence[str] | None = None
) -> str:
    """Hex digest of a call's positional and keyword arguments.

    ``names`` are the positional parameters' names, used in error messages
    (default ``args[0]``, ``args[1]``...). Keyword order does not matter.
    """
    labels = list(names or ())
    labels += [f"args[{i}]" for i in range(len(labels), len(args))]
    hasher = blake3(FORMAT)
    _int(hasher, len(args))
    for label, value in zip(labels, args, strict=False):
        hasher.update(_digest_argument(label, value))
    _int(hasher, len(kwargs))
    for key in sorted(kwargs):
        _text(hasher, b"k", key)
        hasher.update(_digest_argument(key, kwargs[key]))
    return hasher.hexdigest()


def _digest_argument(label: str, value: object) -> bytes:
    try:
        return _Walker().digest(value, label)
    except _Refused as refused:
        where = (
            "" if refused.where == label else f"{refused.where} is a {type_name(refused.value)}: "
        )
        raise UnhashableInput(label, type_name(value), where + refused.reason) from None
    except RecursionError:
        raise UnhashableInput(label, type_name(value), "it is nested too deeply") from None


class _Walker:
    """Feeds one value, recursively, into hashers; refuses cycles."""

    def __init__(self) -> None:
        self._open: set[int] = set()

    def digest(self, value: object, where: str) -> bytes:
        hasher = blake3()
        self.feed(hasher, value, where)
        return hasher.digest()

    def feed(self, hasher: Any, value: object, where: str) -> None:
        encode = _SCALARS.get(type(value))
        if encode is not None:
            encode(hasher, value)
            return
        if id(value) in self._open:
            raise _Refused(where, value, "it contains itself")
        self._open.add(id(value))
        try:
            self._feed_composite(hasher, value, where)
        finally:
            self._open.discard(id(value))

    def _feed_composite(self, hasher: Any, value: object, where: str) -> None:
        for matches, encode in _COMPOSITES:
            if matches(value):
                encode(self, hasher, value, where)
                return
        raise _Refused(where, value, "podcode hashes only data it can read by content")

    def feed_items(self, hasher: Any, items: Sequence[object], where: str) -> None:
        _int(hasher, len(items))
        for index, item in enumerate(items):
            self.feed(hasher, item, f"{where}[{index}]")

    def feed_unordered(self, hasher: Any, digests: list[bytes]) -> None:
        _int(hasher, len(digests))
        for digest in sorted(digests):
            hasher.update(digest)


# -- scalars: exact types only (a subclass of int is not an int here) ----------------


def _int(hasher: Any, number: int) -> None:
    hasher.update(struct.pack("<Q", number))


def _record(hasher: Any, tag: bytes, payload: bytes) -> None:
    hasher.update(tag)
    _int(hasher, len(payload))
    hasher.update(payload)


def _text(hasher: Any, tag: bytes, text: str) -> None:
    _record(hasher, tag, text.encode("utf-8", "surrogatepass"))


def _encode_int(hasher: Any, value: Any) -> None:
    _record(hasher, b"i", value.to_bytes(value.bit_length() // 8 + 1, "little", signed=True))


def _float_bytes(value: float) -> bytes:
    return b"nan" if math.isnan(value) else struct.pack("<d", value)


def _encode_complex(hasher: Any, value: Any) -> None:
    _record(hasher, b"c", _float_bytes(value.real) + _float_bytes(value.imag))


_SCALARS: dict[type, Callable[[Any, Any], None]] = {
    type(None): lambda h, v: h.update(b"N"),
    type(Ellipsis): lambda h, v: h.update(b"E"),
    bool: lambda h, v: h.update(b"T" if v else b"F"),
    int: _encode_int,
    float: lambda h, v: _record(h, b"f", _float_bytes(v)),
    complex: _encode_complex,
    str: lambda h, v: _text(h, b"s", v),
    bytes: lambda h, v: _record(h, b"b", v),
    bytearray: lambda h, v: _record(h, b"B", bytes(v)),
    memoryview: lambda h, v: _record(h, b"m", v.tobytes()),
    decimal.Decimal: lambda h, v: _text(h, b"D", str(v)),
    fractions.Fraction: lambda h, v: _text(h, b"Q", f"{v.numerator}/{v.denominator}"),
    uuid.UUID: lambda h, v: _record(h, b"U", v.bytes),
    datetime.datetime: lambda h, v: _text(h, b"dt", v.isoformat()),
    datetime.date: lambda h, v: _text(h, b"d", v.isoformat()),
    datetime.time: lambda h, v: _text(h, b"t", v.isoformat()),
    datetime.timedelta: lambda h, v: _text(h, b"td", f"{v.days},{v.seconds},{v.microseconds}"),
    range: lambda h, v: _text(h, b"r", f"{v.start},{v.stop},{v.step}"),
}


def code_fingerprint(func: Callable[..., Any]) -> str:
    """A digest of ``func``'s own code, as joblib.Memory keys a function: its source text
    when it can be read (an edit of the body, the signature or a decorator's arguments
    changes it), else its compiled code. The functions it calls are not included."""
    code = getattr(inspect.unwrap(func), "__code__", None)
    if not isinstance(code, types.CodeType):
        return blake3(repr(func).encode()).hexdigest()[:32]
    return _code_digest(code)


@functools.lru_cache(maxsize=1024)
def _code_digest(code: types.CodeType) -> str:
    try:
        text = inspect.getsource(code).encode()
    except (OSError, TypeError):
        text = _compiled(code)
    return blake3(text).hexdigest()[:32]


def _compiled(code: types.CodeType) -> bytes:
    """The parts of a code object that say what it does (its constants, recursively)."""
    consts = [_compiled(c) if isinstance(c, types.CodeType) else repr(c).encode()
              for c in code.co_consts]
    return b"\0".join([code.co_code, repr(code.co_names).encode(), *consts])


def _buffer(hasher: Any, data: Any) -> None:
    """Feed a flat byte buffer; BLAKE3 hashes a large one on several threads."""
    size = len(data)
    _int(hasher, size)
    if size < PARALLEL_BYTES:
        hasher.update(data)
        return
    big = blake3(max_threads=blake3.AUTO)
    big.update(data)
    hasher.update(big.digest())


# -- composites ----------------------------------------------------------------------


def _typed(hasher: Any, tag: bytes, value: object) -> None:
    _text(hasher, tag, type_name(value))


_SEQUENCE_TAGS: dict[type, bytes] = {list: b"L", tuple: b"P"}


def _encode_sequence(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    tag = _SEQUENCE_TAGS.get(type(value))
    if tag is None:  # a subclass, e.g. a namedtuple: its type counts
        _typed(hasher, b"S", value)
        tag = b"L" if isinstance(value, list) else b"P"
    hasher.update(tag)
    walker.feed_items(hasher, value, where)


def _encode_set(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    _typed(hasher, b"Z", value)
    walker.feed_unordered(hasher, [walker.digest(item, f"{where} item") for item in value])


def _encode_mapping(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    _typed(hasher, b"M", value)
    pairs = [
        walker.digest(key, f"{where} key") + walker.digest(item, f"{where}[{key!r}]")
        for key, item in value.items()
    ]
    if isinstance(value, OrderedDict):
        _int(hasher, len(pairs))
        for pair in pairs:
            hasher.update(pair)
    else:
        walker.feed_unordered(hasher, pairs)


def _encode_dataclass(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    _typed(hasher, b"C", value)
    fields = dataclasses.fields(value)
    _int(hasher, len(fields))
    for field in fields:
        _text(hasher, b"n", field.name)
        walker.feed(hasher, getattr(value, field.name), f"{where}.{field.name}")


def _encode_enum(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    _typed(hasher, b"e", value)
    _text(hasher, b"n", value.name)
    walker.feed(hasher, value.value, f"{where}.value")


def _encode_path(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    _text(hasher, b"p", value.as_posix())


def _encode_custom(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    result = value.__podcode_hash__()
    if isinstance(result, str):
        result = result.encode("utf-8", "surrogatepass")
    if not isinstance(result, (bytes, bytearray)):
        raise _Refused(where, value, "its __podcode_hash__() returned neither bytes nor str")
    _typed(hasher, b"X", value)
    _record(hasher, b"x", bytes(result))


def _is_numpy(value: object) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic))


def _encode_numpy(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    import numpy

    if isinstance(value, numpy.generic):
        _text(hasher, b"g", value.dtype.str)
        _record(hasher, b"v", value.tobytes())
        return
    if type(value) is not numpy.ndarray and not isinstance(value, numpy.memmap):
        raise _Refused(
            where,
            value,
            "subclasses of numpy.ndarray are not hashed by content; pass numpy.asarray(value)",
        )
    dtype = value.dtype
    _text(hasher, b"A", repr(dtype.descr) if dtype.fields is not None else dtype.str)
    _int(hasher, value.ndim)
    for size in value.shape:
        _int(hasher, size)
    if dtype.hasobject:
        if dtype.fields is not None:
            raise _Refused(where, value, "structured arrays with object fields are not hashed")
        walker.feed_items(hasher, list(value.flat), f"{where}.flat")
        return
    data = numpy.ascontiguousarray(value).reshape(-1).view(numpy.uint8)
    _buffer(hasher, data)


def _is_plain_subclass(value: object) -> bool:
    """A subclass of a scalar type (IntEnum is caught before): hash as the base value."""
    return any(isinstance(value, base) for base in (int, float, str, bytes, complex))


def _encode_plain_subclass(walker: _Walker, hasher: Any, value: Any, where: str) -> None:
    base = next(b for b in (bool, int, float, str, bytes, complex) if isinstance(value, b))
    _typed(hasher, b"S", value)
    _SCALARS[base](hasher, base(value))


_COMPOSITES: list[tuple[Callable[[object], bool], Callable[[_Walker, Any, Any, str], None]]] = [
    (lambda v: hasattr(type(v), "__podcode_hash__"), _encode_custom),
    (lambda v: isinstance(v, enum.Enum), _encode_enum),
    (lambda v: isinstance(v, (list, tuple)), _encode_sequence),
    (lambda v: isinstance(v, dict), _encode_mapping),
    (lambda v: isinstance(v, (set, frozenset)), _encode_set),
    (lambda v: dataclasses.is_dataclass(v) and not isinstance(v, type), _encode_dataclass),
    (lambda v: isinstance(v, pathlib.PurePath), _encode_path),
    (_is_numpy, _encode_numpy),
    (_is_plain_subclass, _encode_plain_subclass),
]
"""Checked in order for values whose exact type is not a scalar type."""
