"""A workspace file's whole text, read page by page (interactive/agent/filetext.py)."""

from __future__ import annotations

from typing import Any

from interactive.agent.filetext import whole_text

TEXT = "".join(f"row {n}\n" for n in range(1, 96))


def pages(size: int) -> Any:
    lines = TEXT.splitlines()
    asked: list[int | None] = []

    def read(start: int | None) -> dict[str, Any]:
        asked.append(start)
        first = start or 1
        last = min(first + size - 1, len(lines))
        return {"start": first, "end": last, "total_lines": len(lines),
                "text": "".join(f"{n:6d}\t{lines[n - 1]}\n" for n in range(first, last + 1))}

    return read, asked


def test_pages_are_joined_into_the_file() -> None:
    read, asked = pages(40)
    assert whole_text(read) == TEXT
    assert asked == [None, 41, 81]


def test_pages_of_line_objects_and_plain_text_are_read_too() -> None:
    assert whole_text(lambda start: {"lines": [{"line": 1, "text": "a"}], "total_lines": 1}
                      ) == "a\n"
    assert whole_text(lambda start: {"text": "a\n\tb", "end": None}) == "a\n\tb\n"
