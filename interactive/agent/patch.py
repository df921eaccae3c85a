"""Applying an agent's unified diff to the session's files, all or nothing: pure functions.

:func:`parse` reads ``diff -u`` / ``git diff`` text into one :class:`FilePatch` per file;
:func:`apply` applies one to a file's current text. A hunk is placed where its header says
when its old lines are there, else where they are found nearest to it (an agent's line
numbers drift); a hunk whose old lines are nowhere is refused, naming the hunk and the
first line that differs. Deleting or renaming files is refused: the session's workspace
keeps every file it had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from interactive.base.errors import PodcodeError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_FILE = "/dev/null"


class PatchRefused(PodcodeError):
    """The diff cannot be applied (the message says which file and hunk, and why)."""


@dataclass
class Hunk:
    header: str
    old_start: int
    lines: list[str] = field(default_factory=list)
    """Each line of the hunk with its prefix: ``' '``, ``'-'`` or ``'+'``."""

    @property
    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "-")]

    @property
    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "+")]


@dataclass
class FilePatch:
    path: str
    """Relative to the workspace (``a/``, ``b/`` prefixes removed)."""
    created: bool = False
    hunks: list[Hunk] = field(default_factory=list)


def _path(raw: str) -> str:
    name = raw.split("\t", 1)[0].strip()
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return name


def parse(text: str) -> list[FilePatch]:
    """The files and hunks of a unified diff; :class:`PatchRefused` if it holds none, or
    deletes or renames a file."""
    patches: list[FilePatch] = []
    old_name: str | None = None
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if line.startswith("--- ") and number < len(lines) and lines[number].startswith("+++ "):
            old_name = _path(line[4:])
        elif line.startswith("+++ ") and old_name is not None:
            new_name = _path(line[4:])
            if new_name == NO_FILE:
                raise PatchRefused(f"the diff deletes {old_name}: deleting files is not "
                                   "supported (empty it, or leave it)")
            if old_name not in (NO_FILE, new_name):
                raise PatchRefused(f"the diff renames {old_name} to {new_name}: renaming is "
                                   "not supported (write the new file with write_file)")
            patches.append(FilePatch(new_name, created=old_name == NO_FILE))
            old_name = None
        elif (match := _HUNK.match(line)) and patches:
            patches[-1].hunks.append(Hunk(line, int(match.group(1))))
        elif patches and patches[-1].hunks and line[:1] in (" ", "-", "+"):
            patches[-1].hunks[-1].lines.append(line)
        elif patches and patches[-1].hunks and line == "":
            patches[-1].hunks[-1].lines.append(" ")  # an empty context line whose space was lost
    if not any(p.hunks for p in patches):
        raise PatchRefused("no hunk found: expected a unified diff (--- a/FILE, +++ b/FILE, "
                           "@@ -L,N +L,N @@ and lines starting with ' ', '-' or '+')")
    return patches


def _fits(lines: list[str], old: list[str], at: int) -> bool:
    return at >= 0 and lines[at:at + len(old)] == old


def _place(lines: list[str], hunk: Hunk, wanted: int, floor: int) -> int | None:
    """Where ``hunk``'s old lines start in ``lines`` (at ``floor`` or after): at ``wanted``
    when they are there, else the nearest place they are."""
    old = hunk.old
    if not old:
        return min(max(wanted, floor), len(lines))
    if wanted >= floor and _fits(lines, old, wanted):
        return wanted
    found = [at for at in range(floor, len(lines) - len(old) + 1) if _fits(lines, old, at)]
    return min(found, key=lambda at: abs(at - wanted)) if found else None


def _mismatch(lines: list[str], hunk: Hunk, at: int) -> str:
    for offset, expected in enumerate(hunk.old):
        actual = lines[at + offset] if 0 <= at + offset < len(lines) else None
        if actual != expected:
            shown = "the end of the file" if actual is None else repr(actual)
            return f"line {at + offset + 1} is {shown} where the diff expects {expected!r}"
    return "its lines are not there"


def apply(patch: FilePatch, text: str | None) -> str:
    """``patch`` applied to ``text`` (the file's current content; None: no such file)."""
    if text is None and not patch.created:
        raise PatchRefused(f"{patch.path}: no such file in the workspace (a new file's diff "
                           "starts with --- /dev/null)")
    if text is not None and patch.created and text:
        raise PatchRefused(f"{patch.path} already exists: the diff creates it")
    source = text or ""
    ending = source.endswith("\n") or not source
    lines = source.splitlines()
    shift, floor = 0, 0
    for number, hunk in enumerate(patch.hunks, 1):
        wanted = max(0, hunk.old_start - 1 + shift) if hunk.old else hunk.old_start + shift
        at = _place(lines, hunk, wanted, floor)
        if at is None:
            raise PatchRefused(
                f"{patch.path}: hunk {number} ({hunk.header}) does not apply: "
                f"{_mismatch(lines, hunk, min(wanted, max(0, len(lines) - 1)))}; read the file "
                "again (read_file) and make the diff against what it holds now")
        lines[at:at + len(hunk.old)] = hunk.new
        shift += len(hunk.new) - len(hunk.old) + (at - wanted)
        floor = at + len(hunk.new)
    return "\n".join(lines) + ("\n" if lines and ending else "")
