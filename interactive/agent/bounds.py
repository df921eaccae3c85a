"""Every answer the MCP server gives fits a bound: :data:`MAX_BYTES` of text, the JSON it
carries shortened (long lists and strings cut, saying how much) rather than broken off.

Pure functions: an agent's context is small and expensive, and a session's values (a
DataFrame of a million rows, a list of a million items) are not.
"""

from __future__ import annotations

import json
from typing import Any

MAX_BYTES = 32 * 1024
"""The most UTF-8 bytes of text one tool result carries (its images aside)."""
_FIRST_ITEMS = 200
_FIRST_CHARS = 8_000
_AT_MOST_ITEMS = 5_000
_AT_MOST_CHARS = 64 * 1024
"""Whatever the data, no more than this is even written out before it is measured."""


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def clip(text: str, limit: int = MAX_BYTES) -> str:
    """``text`` within ``limit`` UTF-8 bytes, ending with a line that says how much was
    cut when it was."""
    if size(text) <= limit:
        return text
    note_room = 120
    kept = text.encode("utf-8")[: max(0, limit - note_room)].decode("utf-8", "ignore")
    cut = size(text) - size(kept)
    return f"{kept}\n... [{cut} more bytes not shown: the answer is capped at {limit} bytes]"


def shorten(data: Any, items: int, chars: int) -> Any:
    """``data`` with every list cut to its first ``items`` (and a last item saying how many
    more there were) and every string to ``chars`` characters (saying so)."""
    if isinstance(data, str):
        if len(data) <= chars:
            return data
        return f"{data[:chars]}... [{len(data) - chars} more characters not shown]"
    if isinstance(data, dict):
        return {k: shorten(v, items, chars) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        kept = [shorten(v, items, chars) for v in data[:items]]
        if len(data) > items:
            kept.append(f"[{len(data) - items} more not shown]")
        return kept
    return data


def dumps(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, default=str)


def bounded_json(data: Any, limit: int = MAX_BYTES) -> str:
    """``data`` as JSON text within ``limit`` bytes: shortened (lists, then strings, halved
    until it fits) so that it stays JSON; clipped as text only as a last resort."""
    text = dumps(shorten(data, _AT_MOST_ITEMS, _AT_MOST_CHARS))
    items, chars = _FIRST_ITEMS, _FIRST_CHARS
    while size(text) > limit and (items > 1 or chars > 64):
        text = dumps(shorten(data, items, chars))
        items, chars = max(1, items // 2), max(64, chars // 2)
    return clip(text, limit)
