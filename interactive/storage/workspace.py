"""What the engineer changed in the workspace since the session opened.

A snapshot stamps every file (modification time and size) and keeps the text
of small text files, so that changed files can be listed, reloaded and saved
with a unified diff. Large trees are bounded: folders such as ``.git`` and
``node_modules`` are skipped and at most ``max_files`` files are stamped.

A stamp alone misses an edit of the same size made within the filesystem's timestamp
granularity of the snapshot (a kernel tick on ext4, a second or two elsewhere): the file
keeps its stamp. So a file stamped within :data:`RACY_NS` of the snapshot (or after it)
also has its content's hash kept, and is compared by content, as git does with a "racily
clean" file; and a file that changed while it was read is read again.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import os
import time
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
NOTEBOOKS = ".vscode/podcode/notebook-"
"""But the session's notebooks (``notebook-<session>.ipynb``) are the engineer's work once
they change them: a notebook is watched from when it is written (:meth:`Snapshot.adopt`)."""
_SESSION_FOLDER = NOTEBOOKS.rsplit("/", 1)[0] + "/"
MAX_TEXT_BYTES = 512 * 1024
MAX_TEXT_TOTAL = 32 * 1024 * 1024

RACY_NS = 2_000_000_000
"""Files stamped this close to the snapshot's start, or later, are compared by content."""
MAX_HASHED_BYTES = 16 * 1024 * 1024
"""A larger file stamped close to the snapshot is compared by its stamp only."""

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
            d for d in dirs if d not in SKIP_DIRS and _rel(base, d) != home
            and (_rel(base, d) not in SKIP_PATHS or NOTEBOOKS.startswith(_rel(base, d) + "/"))
        )
        for name in sorted(files):
            if _skipped(_rel(base, name)):
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


def is_notebook(rel: str) -> bool:
    return rel.startswith(NOTEBOOKS) and rel.endswith(".ipynb") and "/" not in rel[len(NOTEBOOKS):]


def _skipped(rel: str) -> bool:
    """Whether ``rel`` (a file) is podcode's own: the session's files, but no notebook."""
    return rel in SKIP_PATHS or (rel.startswith(_SESSION_FOLDER) and not is_notebook(rel))


def _rel(base: str, name: str) -> str:
    return name if base == "." else f"{base}/{name}".replace(os.sep, "/")


def _stamp(stat: os.stat_result) -> Stamp:
    return stat.st_mtime_ns, stat.st_size


def _digest(path: Path, text: str | None = None) -> str | None:
    """The hash of the file's bytes (None: it cannot be read); ``text``: its bytes as read
    already (UTF-8 text encodes back to the same bytes), so the hash is of that read."""
    try:
        data = path.read_bytes() if text is None else text.encode()  # <= MAX_HASHED_BYTES
    except OSError:
        return None
    return hashlib.blake2b(data).hexdigest()


def _read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _steady(path: Path, stamp: Stamp, keep_text: bool) -> tuple[Stamp, str | None]:
    """The file's stamp and (``keep_text``) text, read so that they agree: a file written
    while it was read is read again (a text newer than its stamp would hide the edit)."""
    text = None
    for _ in range(3):
        text = _read_text(path) if keep_text else None
        try:
            now = _stamp(os.stat(path))
        except OSError:
            break
        if now == stamp:
            break
        stamp = now
    return stamp, text


@dataclass
class Snapshot:
    """The state of ``root`` when the session opened."""

    root: Path
    stamps: dict[str, Stamp] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    """Content hashes of the files stamped within :data:`RACY_NS` of the snapshot."""

    @classmethod
    def take(cls, root: Path, max_files: int = 20000) -> Snapshot:
        snapshot = cls(Path(root).resolve())
        racy_after = time.time_ns() - RACY_NS
        budget = MAX_TEXT_TOTAL
        for rel, stat in walk(snapshot.root, max_files):
            keep_text = stat.st_size <= min(MAX_TEXT_BYTES, budget)
            stamp, text = _steady(snapshot.root / rel, _stamp(stat), keep_text)
            snapshot.stamps[rel] = stamp
            if text is not None:
                snapshot.texts[rel] = text
                budget -= stamp[1]
            if stamp[0] >= racy_after and stamp[1] <= MAX_HASHED_BYTES:
                digest = _digest(snapshot.root / rel, text)
                if digest is not None:
                    snapshot.digests[rel] = digest
        return snapshot

    def changed(self) -> list[str]:
        """Relative paths added, modified or deleted since the snapshot (a file stamped
        close to the snapshot and stamped the same now is compared by content)."""
        now = {rel: _stamp(stat) for rel, stat in walk(self.root)}
        changed = {rel for rel, stamp in now.items()
                   if self.stamps.get(rel) != stamp or self._racy_edit(rel)}
        # A notebook gone went with the session's files, never by the engineer's hand.
        changed |= {rel for rel in set(self.stamps) - set(now) if not is_notebook(rel)}
        return sorted(changed)

    def adopt(self, rel: str) -> None:
        """Watch ``rel``, a file podcode just wrote, from its present state: it is an edit
        only once it changes (the starter notebook, written after the snapshot)."""
        path = self.root / rel
        try:
            stamp, text = _steady(path, _stamp(os.stat(path)), True)
        except OSError:
            return
        self.stamps[rel] = stamp
        if text is not None:
            self.texts[rel] = text
        digest = _digest(path, text)
        if digest is not None:
            self.digests[rel] = digest

    def _racy_edit(self, rel: str) -> bool:
        """Whether a file whose stamp is as it was holds other bytes (an edit of the same
        size within the filesystem's timestamp granularity of the snapshot)."""
        digest = self.digests.get(rel)
        return digest is not None and _digest(self.root / rel) != digest

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
