"""Tables and human-readable times for the terminal."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone


def duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h{minutes % 60:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def since(when: float | None, now: float) -> str:
    return "-" if when is None else duration(now - when)


def until(when: float | None, now: float) -> str:
    if when is None:
        return "-"
    return f"in {duration(when - now)}" if when > now else "due now"


def iso(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clock_time(when: float, now: float) -> str:
    """``HH:MM:SS`` in this machine's time zone (with the date when not within a day)."""
    shape = "%H:%M:%S" if abs(when - now) < 86400 else "%Y-%m-%d %H:%M:%S"
    return time.strftime(shape, time.localtime(when))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by three spaces, like kubectl."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def fields(pairs: Sequence[tuple[str, str]]) -> str:
    """``Key:   value`` lines."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    return "\n".join(f"{(k + ':').ljust(width)}  {v}" for k, v in pairs)
