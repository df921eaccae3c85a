"""A frame's locals summarised within bounds (``GET /api/frames/{index}/locals``).

Each value is told by its type and size first, as the debugger's Variables view does: an
array or tensor by its shape and dtype, a DataFrame by its shape, its columns' dtypes and
its first rows, a sequence, set or mapping by its length and its first items (each
summarised in turn, shorter), a string by its length and its start. ``repr`` is called
only on what is small: a scalar, an array of a few elements, an object that is no
container (cut at :data:`MAX_REPR_CHARS`), never on a big container whole. Whatever a
value's own method raises is shown as that error.

The answer holds at most :data:`MAX_LOCALS` locals and :data:`MAX_ANSWER_BYTES` of JSON;
``left_out`` counts the locals dropped.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from typing import Any

from interactive.doors.notebook.outputs import safe_text
from interactive.doors.notebook.outputs import summary as array_line

MAX_LOCALS = 200
MAX_ANSWER_BYTES = 32 * 1024
MAX_REPR_CHARS = 500
"""The longest ``repr`` of one value."""
ITEM_CHARS = 80
"""The longest summary of one item of a container."""
HEAD_ITEMS = 5
"""Items of a container (rows of a DataFrame) shown."""
SMALL_ARRAY = 64
"""An array of at most this many elements is shown whole (its ``repr``)."""
MAX_COLUMNS = 30
"""A DataFrame's columns whose dtype is listed."""
SCALARS = (bool, int, float, complex, type(None))
SEQUENCES = (list, tuple, set, frozenset)


def type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more chars)"


def _length(value: Any) -> int | None:
    """``len(value)`` for a container, without calling anything of a value that is none."""
    if not hasattr(type(value), "__len__"):
        return None
    try:
        return int(len(value))
    except Exception:
        return None


def _pandas(value: Any) -> str | None:
    """A DataFrame's or Series' summary (told by its class, pandas is not imported here)."""
    names = {c.__qualname__ for c in type(value).__mro__
             if c.__module__.split(".")[0] == "pandas"}
    if "DataFrame" in names:
        rows, columns = value.shape
        dtypes = ", ".join(f"{name}: {dtype}" for name, dtype in
                           itertools.islice(value.dtypes.items(), MAX_COLUMNS))
        more = f", ... {columns - MAX_COLUMNS} more columns" if columns > MAX_COLUMNS else ""
        head = value.head(HEAD_ITEMS).to_string(max_cols=12, max_colwidth=40)
        return f"DataFrame shape=({rows}, {columns}); dtypes: {dtypes}{more}\n" \
            f"{cut(head, 2 * MAX_REPR_CHARS)}"
    if "Series" in names:
        head = value.head(HEAD_ITEMS).to_string(max_rows=HEAD_ITEMS)
        return f"Series length={len(value)} dtype={value.dtype} name={value.name!r}\n" \
            f"{cut(head, MAX_REPR_CHARS)}"
    return None


def _array(value: Any) -> str | None:
    line = array_line(value)
    if line is None:
        return None
    try:
        size = math.prod(int(d) for d in value.shape)
    except (TypeError, ValueError):
        return line
    return f"{line}\n{cut(safe_text(value, 'repr'), MAX_REPR_CHARS)}" if size <= SMALL_ARRAY \
        else line


def _container(value: Any, length: int, depth: int) -> str:
    if isinstance(value, Mapping):
        items = (f"{summarise(k, ITEM_CHARS, depth + 1)}: {summarise(v, ITEM_CHARS, depth + 1)}"
                 for k, v in itertools.islice(value.items(), HEAD_ITEMS))
        opened, closed = "{", "}"
    else:
        items = (summarise(v, ITEM_CHARS, depth + 1)
                 for v in itertools.islice(iter(value), HEAD_ITEMS))
        opened, closed = "[", "]"
    shown = ", ".join(items)
    more = f", ... {length - HEAD_ITEMS} more" if length > HEAD_ITEMS else ""
    return f"length={length} {opened}{shown}{more}{closed}"


def summarise(value: Any, limit: int = MAX_REPR_CHARS, depth: int = 0) -> str:
    """One line or a few that tell what ``value`` is, at most about ``limit`` characters."""
    try:
        if isinstance(value, SCALARS):
            return cut(safe_text(value, "repr"), limit)
        if isinstance(value, (str, bytes, bytearray)):
            head = safe_text(value[:limit], "repr")
            return head if len(value) <= limit else f"length={len(value)} {cut(head, limit)}"
        shown = _pandas(value) or _array(value)
        if shown is not None:
            return cut(shown, 4 * limit) if depth == 0 else cut(shown.split("\n")[0], limit)
        length = _length(value)
        if length is not None and (isinstance(value, (*SEQUENCES, Mapping)) or length > HEAD_ITEMS):
            if depth >= 2 or not _iterable(value):
                return f"length={length}"
            return cut(_container(value, length, depth), limit)
        return cut(safe_text(value, "repr"), limit)
    except Exception as exc:  # the value's own method failed: say so, go on
        return f"<could not summarise a {type_name(value)}: {type(exc).__name__}: " \
            f"{cut(safe_text(exc), 200)}>"


def _iterable(value: Any) -> bool:
    return isinstance(value, (*SEQUENCES, Mapping)) or hasattr(type(value), "__iter__")


def summarise_locals(names: Mapping[str, Any], frame: int) -> dict[str, Any]:
    """The answer of ``GET /api/frames/{index}/locals`` for a frame's ``names``."""
    kept: list[dict[str, str]] = []
    used = 200  # the answer's own keys
    total = len(names)
    for name, value in itertools.islice(names.items(), MAX_LOCALS):
        entry = {"name": name, "type": type_name(value), "summary": summarise(value)}
        size = len(json.dumps(entry).encode())
        if used + size > MAX_ANSWER_BYTES:
            break
        kept.append(entry)
        used += size
    return {"frame": frame, "locals": kept, "left_out": total - len(kept)}
