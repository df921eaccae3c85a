"""Reading and searching the workspace's text files for a coding agent
(``GET /api/workspace/file``, ``GET /api/workspace/search``): blocking functions, called
off the event loop.

Only the workspace: a path that is absolute, climbs out with ``..`` or leads out through
a symbolic link is refused (as pushed files are, :func:`interactive.doors.desktop.inside`),
and so is what podcode keeps there (its session files, which hold the token, and every
podcode home or store in the tree). Binary files are refused. Both answers are bounded:
a file by :data:`MAX_LINES` lines and :data:`MAX_FILE_BYTES`, a search by
:data:`MAX_MATCHES` matches and :data:`SEARCH_SECONDS`, each saying what was cut. A search
walks the files the workspace snapshot watches (:func:`interactive.storage.workspace.walk`:
no ``.git``, no ``node_modules``, none of podcode's own files).
"""

from __future__ import annotations

import fnmatch
import os
import re
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from interactive.doors.desktop import Refused, inside
from interactive.storage import workspace as files

MAX_LINES = 2000
MAX_FILE_BYTES = 64 * 1024
"""The most text one read answers (UTF-8)."""
MAX_LINE_CHARS = 4000
"""A longer line (a minified file's) is cut, saying how much."""
COUNT_LINES_BYTES = 16 << 20
"""A file up to this size has its lines counted (``total_lines``); a larger one does not."""
MAX_MATCHES = 500
MAX_MATCH_CHARS = 300
"""A matching line is cut to this many characters."""
MAX_SEARCHED_BYTES = 4 << 20
"""Files larger than this are not searched (data, not code)."""
MAX_LINE_SEARCHED = 4000
"""Only the start of a longer line is matched (a minified file's one line)."""
SEARCH_SECONDS = 10.0
"""A search stops (``truncated``) after this long."""
SNIFF_BYTES = 8192


class NotText(Refused):
    """A binary file, or no file at all."""


def _podcode_own(root: Path, rel: str) -> bool:
    """Whether ``rel`` is podcode's (a session file, a generated script) or lies in a
    podcode home or store: never read for an agent."""
    pure = PurePosixPath(rel)
    if files.VSCODE in pure.parts:
        at = pure.parts.index(files.VSCODE)
        rest = pure.parts[at + 1:]
        if rest[:1] == (files.SESSION_FILE_NAME,) or (
                rest[:1] == ("podcode",) and not files.is_notebook("/".join(pure.parts[at:]))):
            return True
    if any(part in {".podcode"} for part in pure.parts):
        return True
    configured = files.configured_folders(root)
    if any(rel == folder or rel.startswith(f"{folder}/") for folder in configured):
        return True
    for folder in list(pure.parents)[:-1]:
        path = root / folder
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        if files.podcode_folder(str(path), [e.name for e in entries if e.is_dir()],
                                [e.name for e in entries if not e.is_dir()]):
            return True
    return False


def _sniff_binary(path: Path) -> bool:
    with open(path, "rb") as handle:
        return b"\0" in handle.read(SNIFF_BYTES)


def resolve(workspace: Path, rel: str) -> tuple[Path, str]:
    """The file ``rel`` names in the workspace and its path relative to it; :class:`Refused`
    (or :class:`NotText`) saying why not."""
    target = inside(workspace, rel)
    root = workspace.resolve()
    shown = target.relative_to(root).as_posix()
    if _podcode_own(root, shown):
        raise Refused(f"{ascii(rel)} is podcode's own (session files, homes, stores): "
                      "not shown")
    if not target.is_file():
        raise NotText(f"{ascii(rel)}: no such file in the workspace")
    if _sniff_binary(target):
        raise NotText(f"{ascii(rel)} is a binary file: only text files are shown")
    return target, shown


def read_lines(workspace: Path, rel: str, start: int = 1, end: int | None = None
               ) -> dict[str, Any]:
    """Lines ``start..end`` (1-based, inclusive) of a text file, numbered, bounded."""
    if start < 1 or (end is not None and end < start):
        raise Refused(f"start and end must be line numbers with 1 <= start <= end "
                      f"(got {start}..{end})")
    path, shown = resolve(workspace, rel)
    last = start + MAX_LINES - 1 if end is None else min(end, start + MAX_LINES - 1)
    kept: list[str] = []
    size, number, cut, at_end = 0, 0, False, False
    with open(path, encoding="utf-8", errors="replace", newline=None) as handle:
        for number, line in enumerate(handle, 1):
            if number < start:
                continue
            if number > last:
                number -= 1
                break
            numbered = f"{number:6d}\t{_cut_line(line.rstrip(chr(10)))}\n"
            size += len(numbered.encode())
            if size > MAX_FILE_BYTES:
                cut, number = True, number - 1
                break
            kept.append(numbered)
        else:
            at_end = True
    total = _count_lines(path)
    ended = number if kept else None
    shown_to = ended or start - 1
    more = not at_end and (total is None or shown_to < total)  # lines after those shown
    truncated = cut or (more and (end is None or shown_to < end))
    note = _read_note(cut, truncated, shown_to)
    return {"path": shown, "start": start, "end": ended, "total_lines": total,
            "text": "".join(kept), "truncated": truncated, **({"note": note} if note else {})}


def _cut_line(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]}... ({len(text) - MAX_LINE_CHARS} more characters)"


def _read_note(cut: bool, truncated: bool, shown_to: int) -> str:
    if cut:
        return f"cut at {MAX_FILE_BYTES // 1024} KiB: read on from line {shown_to + 1}"
    if truncated:
        return f"at most {MAX_LINES} lines at once: read on from line {shown_to + 1}"
    return ""


def _count_lines(path: Path) -> int | None:
    try:
        if path.stat().st_size > COUNT_LINES_BYTES:
            return None
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression, or :class:`Refused` naming what is wrong with it."""
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise Refused(f"the pattern {pattern!r} is not a valid regular expression: "
                      f"{exc}") from None


def _matches_glob(rel: str, glob: str | None) -> bool:
    return glob is None or PurePosixPath(rel).match(glob) or fnmatch.fnmatch(rel, glob)


def search(workspace: Path, pattern: str, glob: str | None = None,
           clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """The lines of the workspace's text files (matching ``glob``, if given) where
    ``pattern`` matches, bounded; ``truncated`` when cut."""
    regex = compile_pattern(pattern)
    root = workspace.resolve()
    deadline = clock() + SEARCH_SECONDS
    found: list[dict[str, Any]] = []
    searched, truncated, why = 0, False, ""
    for rel, stat in files.walk(root):
        rel = rel.replace(os.sep, "/")
        if not _matches_glob(rel, glob) or stat.st_size > MAX_SEARCHED_BYTES:
            continue
        if clock() > deadline:
            truncated, why = True, f"stopped after {SEARCH_SECONDS:g} s"
            break
        if not os.path.realpath(root / rel).startswith(f"{root}{os.sep}"):
            continue  # a symbolic link out of the workspace
        searched += 1
        if not _search_file(root / rel, rel, regex, found):
            continue
        if len(found) >= MAX_MATCHES:
            truncated, why = True, f"the first {MAX_MATCHES} matches"
            del found[MAX_MATCHES:]
            break
    return {"pattern": pattern, "glob": glob, "matches": found, "truncated": truncated,
            "files_searched": searched, **({"note": why} if why else {})}


def _search_file(path: Path, rel: str, regex: re.Pattern[str],
                 found: list[dict[str, Any]]) -> bool:
    """Append ``path``'s matching lines to ``found`` (up to one more than the bound);
    whether it was searched (a text file that could be read)."""
    try:
        if _sniff_binary(path):
            return False
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if regex.search(line[:MAX_LINE_SEARCHED]):
                    text = line.rstrip("\n")
                    if len(text) > MAX_MATCH_CHARS:
                        text = f"{text[:MAX_MATCH_CHARS]}..."
                    found.append({"path": rel, "line": number, "text": text})
                    if len(found) > MAX_MATCHES:
                        return True
    except OSError:
        return False
    return True
