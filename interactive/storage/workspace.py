"""What the engineer changed in the workspace since the session opened.

A snapshot stamps every file (modification time and size) and keeps the text
of small text files, so that changed files can be listed, reloaded and saved
with a unified diff. Large trees are bounded: folders such as ``.git`` and
``node_modules`` are skipped and at most ``max_files`` files are stamped.

Only the engineer's edits count. What podcode writes is never one, whichever session (of
this process or another) wrote it: the files of a ``.vscode`` folder that podcode rendered
(``launch.json``, ``settings.json``, ``.gitignore`` as it wrote them or as it put them back,
see :func:`rendered_digests`), its session files there, the temporary file of any atomic
write (``.<name>.<pid>.<random>.partial``), another session's notebook, and every podcode
home or store found in the tree (:func:`podcode_folder`), the configured ``$PODCODE_HOME``
and ``PODCODE_STORE`` included. A ``launch.json`` the engineer changed is theirs: saved.

A stamp alone misses an edit of the same size made within the filesystem's timestamp
granularity of the snapshot (a kernel tick on ext4, a second or two elsewhere): the file
keeps its stamp. So a file stamped within :data:`RACY_NS` of the snapshot (or after it)
also has its content's hash kept, and is compared by content, as git does with a "racily
clean" file; and a file that changed while it was read is read again.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from interactive.base.files import TEMP_SUFFIX
from interactive.base.record import FILE as RECORD_FILE
from interactive.base.record import SESSIONS
from interactive.base.settings import podcode_home
from interactive.storage.edits import EDITS
from interactive.storage.local_store import STORE_MARKER
from interactive.storage.store import local_root, store_url

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
SESSION_FILE_NAME = "podcode-session.json"
SKIP_PATHS = frozenset({f".vscode/{SESSION_FILE_NAME}", ".vscode/podcode"})
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


TEMP_FILE = re.compile(rf"\..+\.\d+\.[0-9a-f]+{re.escape(TEMP_SUFFIX)}")
"""The name of a file being written atomically (:mod:`interactive.base.files`): here for
an instant, by whichever process writes it; never an edit."""
VSCODE = ".vscode"
WRITTEN = "podcode/written.json"
"""In a ``.vscode`` folder: what podcode wrote there (``{name: {"sha256": ...}}``), see
:mod:`interactive.doors.vscode_files`."""
ORIGINALS = "podcode/originals"
"""In a ``.vscode`` folder: the engineer's own files as they were before podcode merged
into them (put back when the last session there ends)."""


def _inside(root: Path, folder: Path) -> str | None:
    """``folder`` relative to ``root`` when it lies inside it, else None."""
    relative = os.path.relpath(os.path.realpath(folder), os.path.realpath(root))
    return None if relative == "." or relative.startswith("..") else relative


def configured_folders(root: Path, environ: Mapping[str, str] | None = None) -> set[str]:
    """``$PODCODE_HOME`` and a local ``PODCODE_STORE``, relative to ``root``, where they
    lie inside it (session records hold secrets, the store holds saved edits: neither is
    ever an edit)."""
    inside = {_inside(root, podcode_home(environ))}
    store = local_root(store_url(environ))
    if store is not None:
        inside.add(_inside(root, store))
    return {rel.replace(os.sep, "/") for rel in inside if rel is not None}


def podcode_folder(folder: str, dirs: list[str], files: list[str]) -> bool:
    """Whether ``folder`` (with these sub-folders and files) is a podcode home (its
    sessions' records, ``sessions/<id>/session.json``) or a store (its marker file, or
    saved edits, ``edits/<task>/latest.diff``): another session's, found in the tree."""
    if STORE_MARKER in files:
        return True
    base = Path(folder)
    if SESSIONS in dirs and any(base.glob(f"{SESSIONS}/*/{RECORD_FILE}")):
        return True
    return EDITS in dirs and any(base.glob(f"{EDITS}/*/latest.diff"))


def walk(
    root: Path, max_files: int = 20000, environ: Mapping[str, str] | None = None
) -> Iterator[tuple[str, os.stat_result]]:
    """Relative paths and stats of the files under ``root``, skipping tool folders,
    podcode's own files and every podcode home or store in the tree (see the module)."""
    count = 0
    skipped = configured_folders(root, environ)
    for folder, dirs, files in os.walk(root):
        base = os.path.relpath(folder, root)
        if base != "." and podcode_folder(folder, dirs, files):
            dirs[:] = []
            continue
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and _rel(base, d) not in skipped
            and (_rel(base, d) not in SKIP_PATHS or NOTEBOOKS.startswith(_rel(base, d) + "/"))
            and not (d == "podcode" and os.path.basename(folder) == VSCODE and base != VSCODE)
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
    """Whether ``rel`` (a file) is podcode's own: a session's files in any ``.vscode``
    folder (but no notebook of the workspace's own), any atomic write's temporary file."""
    parts = PurePosixPath(rel).parts
    if TEMP_FILE.fullmatch(parts[-1]):
        return True
    if len(parts) >= 2 and parts[-2] == VSCODE and parts[-1] == SESSION_FILE_NAME:
        return True
    return rel in SKIP_PATHS or (rel.startswith(_SESSION_FOLDER) and not is_notebook(rel))


def _large(path: Path) -> bool:
    """Too large to be read for a diff (:data:`MAX_HASHED_BYTES`): named only."""
    try:
        return path.stat().st_size > MAX_HASHED_BYTES
    except OSError:
        return False


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def rendered_digests(root: Path, vscode: str) -> dict[str, set[str]]:
    """The SHA-256 of each file of the ``.vscode`` folder ``vscode`` (relative to
    ``root``) as podcode wrote it or as the engineer had it before podcode merged into it:
    what it holds when no edit was made. ``{rel: digests}``."""
    folder = root / vscode
    try:
        written = json.loads((folder / WRITTEN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        written = {}
    found: dict[str, set[str]] = {}
    for name, entry in (written.items() if isinstance(written, dict) else ()):
        if isinstance(entry, dict) and isinstance(entry.get("sha256"), str):
            found.setdefault(f"{vscode}/{name}", set()).add(entry["sha256"])
    try:
        originals = list((folder / ORIGINALS).iterdir())
    except OSError:
        originals = []
    for original in originals:
        digest = _sha256(original)
        if digest is not None:
            found.setdefault(f"{vscode}/{original.name}", set()).add(digest)
    return found


def _vscode_folders(paths: list[str]) -> set[str]:
    return {str(PurePosixPath(rel).parent) for rel in paths
            if PurePosixPath(rel).parent.name == VSCODE}


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
    rendered: dict[str, set[str]] = field(default_factory=dict)
    """The digests of the ``.vscode`` files podcode rendered, as they were at the snapshot
    (another session that ends puts the engineer's own files back, and forgets them)."""
    notebooks: set[str] = field(default_factory=set)
    """This session's notebooks (:meth:`adopt`): another session's is not an edit here."""

    @classmethod
    def take(cls, root: Path, max_files: int = 20000) -> Snapshot:
        snapshot = cls(Path(root).resolve())
        racy_after = time.time_ns() - RACY_NS
        budget = MAX_TEXT_TOTAL
        for rel, stat in walk(snapshot.root, max_files):
            if PurePosixPath(rel).parent.name == VSCODE:
                snapshot._remember_rendered(str(PurePosixPath(rel).parent))
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

    def _remember_rendered(self, vscode: str) -> None:
        if not any(rel.startswith(f"{vscode}/") for rel in self.rendered):
            for rel, digests in rendered_digests(self.root, vscode).items():
                self.rendered.setdefault(rel, set()).update(digests)

    def changed(self) -> list[str]:
        """Relative paths added, modified or deleted since the snapshot (a file stamped
        close to the snapshot and stamped the same now is compared by content); podcode's
        own files are left out (see the module)."""
        now = {rel: _stamp(stat) for rel, stat in walk(self.root)}
        changed = {rel for rel, stamp in now.items()
                   if (self.stamps.get(rel) != stamp or self._racy_edit(rel))
                   and (not is_notebook(rel) or rel in self.notebooks)}
        # A notebook gone went with the session's files, never by the engineer's hand.
        changed |= {rel for rel in set(self.stamps) - set(now) if not is_notebook(rel)}
        return sorted(changed - self._rendered_now(sorted(changed)))

    def _rendered_now(self, changed: list[str]) -> set[str]:
        """Which of the ``changed`` files of a ``.vscode`` folder hold what podcode wrote
        (any session's merge) or put back (the engineer's file as it was before): not
        edits. A file podcode rendered that is gone was removed by podcode (its session
        ended) when its digest at the snapshot was podcode's."""
        ours: set[str] = set()
        for vscode in _vscode_folders(changed):
            rendered = rendered_digests(self.root, vscode)
            for rel in (r for r in changed if str(PurePosixPath(r).parent) == vscode):
                known = rendered.get(rel, set()) | self.rendered.get(rel, set())
                path = self.root / rel
                digest = _sha256(path) if path.exists() else self._digest_at_snapshot(rel)
                if digest is not None and digest in known:
                    ours.add(rel)
        return ours

    def _digest_at_snapshot(self, rel: str) -> str | None:
        text = self.texts.get(rel)
        return None if text is None else hashlib.sha256(text.encode()).hexdigest()

    def adopt(self, rel: str) -> None:
        """Watch ``rel``, a file podcode just wrote, from its present state: it is an edit
        only once it changes (the starter notebook, written after the snapshot)."""
        path = self.root / rel
        try:
            stamp, text = _steady(path, _stamp(os.stat(path)), True)
        except OSError:
            return
        self.stamps[rel] = stamp
        if is_notebook(rel):
            self.notebooks.add(rel)
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
            name = f"{prefix}{rel}"
            if rel in self.stamps and rel not in self.texts and path.exists():
                chunks.append(f"Binary or large file {git_quote(name)} changed\n")
                continue
            after = _read_text(path) if path.exists() and not _large(path) else ""
            if after is None or (path.exists() and _large(path)):
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
