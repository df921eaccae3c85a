"""A workspace file's whole text, read through the control API's bounded, line-numbered
``GET /api/workspace/file`` page by page (pure: the reading is a callable), so that a
diff is applied to what the session's file holds now.

A page is ``{"start", "end", "total_lines", "text"}`` whose ``text`` numbers each line
(``"     7\tline"``); a page of ``lines`` (objects with ``line`` and ``text``) is read too.
Each line of the result ends with a newline (a missing final newline is not seen through
a numbered page).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$")

Page = Callable[[int | None], Mapping[str, Any]]
"""Reads the page that starts at line ``start`` (None: the file's start)."""
MAX_PAGES = 1000
"""A file longer than this many pages is refused (a diff tool is not for data files)."""


def page_lines(answer: Mapping[str, Any]) -> list[tuple[int, str]]:
    """``(number, text)`` of each line in one answer: ``lines`` as objects (``line`` or
    ``number``, and ``text``) or as strings from ``start``; or a whole ``text``."""
    start = answer.get("start")
    first = start if isinstance(start, int) and start > 0 else 1
    raw = answer.get("lines")
    if isinstance(raw, list):
        found = []
        for offset, item in enumerate(raw):
            if isinstance(item, Mapping):
                number = item.get("line", item.get("number", first + offset))
                found.append((int(number), str(item.get("text", ""))))
            else:
                found.append((first + offset, str(item)))
        return found
    text = answer.get("text", answer.get("content"))
    if not isinstance(text, str):
        return []
    rows = text.splitlines()
    numbered = [NUMBERED.match(row) for row in rows]
    if rows and all(numbered):
        return [(int(m.group(1)), m.group(2)) for m in numbered if m]
    return [(first + i, line) for i, line in enumerate(rows)]


def more_after(answer: Mapping[str, Any], last: int) -> bool:
    """Whether the file goes on after line ``last``."""
    total = answer.get("total_lines", answer.get("total"))
    if isinstance(total, int):
        return last < total
    return answer.get("end") is not None or answer.get("truncated") is True


def whole_text(read: Page) -> str:
    """The file's text, every page joined."""
    answer = read(None)
    lines = page_lines(answer)
    for _ in range(MAX_PAGES):
        last = lines[-1][0] if lines else 0
        if not lines or not more_after(answer, last):
            return "".join(f"{text}\n" for _, text in lines)
        answer = read(last + 1)
        page = [(n, t) for n, t in page_lines(answer) if n > last]
        if not page:
            break
        lines.extend(page)
    raise ValueError("the file is too long to patch through the control API")
