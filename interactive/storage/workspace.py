"""What the engineer changed in the workspace since the session opened.

A snapshot stamps every file (modification time and size) and keeps the text
of small text files, so that changed files can be listed, reloaded and saved
with a unified diff. Large trees are bounded: folders such as ``.git`` and
``node_modules`` are skipped and at most ``max_files`` files are stamped.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from interactive.base.settings import podcode_home

log = logging.getLogger(__name__)

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".podcode",
        ".vscode-server",  # a desktop VS Code's server (Remote-SSH) when HOME is the workspace
    }
)
SKIP_PATHS = frozenset({".vscode/podcode-session.json", ".vscode/podcode"})
"""What podcode writes into the workspace (secrets, generated scripts) is not an edit."""
MAX_TEXT_BYTES = 512 * 1024
MAX_TEXT_TOTAL = 32 * 1024 * 1024

Stamp = tuple[int, int]


def _inside(root: Path, folder: Path) -> str | None:
    """``folder`` relative to ``root`` when it lies inside it, else None."""
    relative = os.path.relpath(os.path.realpath(folder), os.path.realpath(root))
    return None if relative == "." or relative.startswith("..") else relative


def walk(root: Path, max_files: int = 20000) -> Iterator[tuple[str, os.stat_result]]:
    """Relative paths and stats of the files under ``root``, skipping tool folders and
    ``$PODCODE_HOME`` when it lies inside ``root`` (session records hold secrets: they are
    never an edit)."""
    count = 0
    home = _inside(root, podcode_home())
    for folder, dirs, files in os.walk(root):
        base = os.path.relpath(folder, root)
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and _rel(base, d) not in SKIP_PATHS
            and _rel(base, d) != home
        )
        for name in sorted(files):
            if _rel(base, name) in SKIP_PATHS:
                continue
            path = os.path.join(folder, name)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            count += 1
            if count > max_files:
                log.warning(
                    "workspace %s has over %d files; only the first are watched", root, max_files
                )
                return
            yield os.path.relpath(path, root), stat


def _rel(base: str, name: str) -> str:
    return name if base == "." else f"{base}/{name}".replace(os.sep, "/")


def _read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@dataclass
class Snapshot:
    """The state of ``root`` when the session opened."""

    root: Path
    stamps: dict[str, Stamp] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    @classmethod
    def take(cls, root: Path, max_files: int = 20000) -> Snapshot:
        snapshot = cls(Path(root).resolve())
        budget = MAX_TEXT_TOTAL
        for rel, stat in walk(snapshot.root, max_files):
            snapshot.stamps[rel] = (stat.st_mtime_ns, stat.st_size)
            if stat.st_size <= min(MAX_TEXT_BYTES, budget):
                text = _read_text(snapshot.root / rel)
                if text is not None:
                    snapshot.texts[rel] = text
                    budget -= stat.st_size
        return snapshot

    def changed(self) -> list[str]:
        """Relative paths added, modified or deleted since the snapshot."""
        now = {rel: (stat.st_mtime_ns, stat.st_size) for rel, stat in walk(self.root)}
        changed = {rel for rel, stamp in now.items() if self.stamps.get(rel) != stamp}
        changed |= set(self.stamps) - set(now)
        return sorted(changed)

    def diff(self, paths: list[str] | None = None, prefix: str = "") -> str:
        """A unified diff of the changed text files that ``git apply`` accepts (binary and
        large files are named only). ``prefix`` is put before every path: the workspace's
        place in its git checkout (see :func:`interactive.storage.edits.git_prefix`)."""
        chunks: list[str] = []
        for rel in self.changed() if paths is None else paths:
            path = self.root / rel
            after = _read_text(path) if path.exists() else ""
            name = f"{prefix}{rel}"
            if after is None or (rel in self.stamps and rel not in self.texts and path.exists()):
                chunks.append(f"Binary or large file {git_quote(name)} changed\n")
                continue
            chunks.extend(
                _terminated(
                    difflib.unified_diff(
                        self.texts.get(rel, "").splitlines(keepends=True),
                        after.splitlines(keepends=True),
                        fromfile=git_quote(f"a/{name}") if rel in self.stamps else "/dev/null",
                        tofile=git_quote(f"b/{name}") if path.exists() else "/dev/null",
                    )
                )
            )
        return "".join(chunks)


_GIT_ESCAPES = {0x07: "a", 0x08: "b", 0x09: "t", 0x0A: "n", 0x0B: "v", 0x0C: "f", 0x0D: "r",
                0x22: '"', 0x5C: "\\"}


def git_quote(name: str) -> str:
    """``name`` as git writes a path in a patch: as it is when it is plain, else in double
    quotes with C escapes (a backslash, a quote, a control character, bytes that are not
    UTF-8: a file name may hold any of them), which ``git apply`` reads back."""
    if name.isprintable() and '"' not in name and "\\" not in name:
        return name  # bytes that are not UTF-8 (surrogate escapes) are not printable
    quoted = "".join(
        f"\\{_GIT_ESCAPES[byte]}" if byte in _GIT_ESCAPES
        else chr(byte) if 0x20 <= byte < 0x7F else f"\\{byte:03o}"
        for byte in os.fsencode(name)
    )
    return f'"{quoted}"'


def _terminated(lines: Iterator[str]) -> Iterator[str]:
    """Diff lines, each ending in a newline; a last line without one is marked as git does."""
    for line in lines:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n"
            if line[:1] in "+- " and not line.startswith(("---", "+++")):
                yield "\\ No newline at end of file\n"
