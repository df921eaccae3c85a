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
    }
)
SKIP_PATHS = frozenset({".vscode/podcode-session.json", ".vscode/podcode"})
"""What podcode writes into the workspace (secrets, generated scripts) is not an edit."""
MAX_TEXT_BYTES = 512 * 1024
MAX_TEXT_TOTAL = 32 * 1024 * 1024

Stamp = tuple[int, int]


def walk(root: Path, max_files: int = 20000) -> Iterator[tuple[str, os.stat_result]]:
    """Relative paths and stats of the files under ``root``, skipping tool folders."""
    count = 0
    for folder, dirs, files in os.walk(root):
        base = os.path.relpath(folder, root)
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and _rel(base, d) not in SKIP_PATHS
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

    def diff(self, paths: list[str] | None = None) -> str:
        """A unified diff of the changed text files (binary files are named only)."""
        chunks: list[str] = []
        for rel in self.changed() if paths is None else paths:
            before = self.texts.get(rel, "")
            path = self.root / rel
            after = _read_text(path) if path.exists() else ""
            if after is None or (rel in self.stamps and rel not in self.texts and path.exists()):
                chunks.append(f"Binary or large file {rel} changed\n")
                continue
            chunks.extend(
                difflib.unified_diff(
                    before.splitlines(keepends=True),
                    after.splitlines(keepends=True),
                    fromfile=f"a/{rel}",
                    tofile=f"b/{rel}",
                )
            )
        return "".join(line if line.endswith("\n") else line + "\n" for line in chunks)
