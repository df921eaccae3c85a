"""A fix, from the serving pod's workspace and into another pod's copy.

The serving pod's fix is every file edited since the bug (:func:`edits_since`), each
with the sha256 it had then; another pod writes it only where every file may take it
(:func:`apply_fix`, deciding with :func:`interactive.distributed.jobfix.decide`), each
file replaced at once, its mode kept.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from interactive.distributed import jobfix

MAX_FIX_BYTES = 64 << 20
"""The most a fix carries (the store holds it until the job ends)."""


@dataclass(frozen=True)
class Edits:
    files: list[jobfix.FileEdit]
    left: list[str]
    """Why some changed files are not carried (one line each)."""


def edits_since(root: Path, changed: list[str], texts: dict[str, str],
                existed: set[str]) -> Edits:
    """The fix: each file of ``changed`` (relative to ``root``) with its content now and
    its sha256 at the failure (from ``texts``, the snapshot's; a file not in ``existed``
    is new). A deleted file, or one whose content at the failure is not known (binary or
    large), is not carried: said in ``left``."""
    files: list[jobfix.FileEdit] = []
    left: list[str] = []
    total = 0
    for rel in changed:
        path = root / rel
        if not path.is_file():
            left.append(f"{rel} was deleted: a fix carries new and edited files only")
            continue
        if rel in existed and rel not in texts:
            left.append(f"{rel} is not carried: its content at the failure is not known "
                        "(a binary or large file)")
            continue
        content = path.read_bytes()
        if total + len(content) > MAX_FIX_BYTES:
            left.append(f"{rel} is not carried: the fix would pass {MAX_FIX_BYTES >> 20} MiB")
            continue
        total += len(content)
        base = jobfix.sha256_hex(texts[rel].encode()) if rel in existed else None
        files.append(jobfix.FileEdit(rel, content, base))
    return Edits(files, left)


def local_digests(root: Path, paths: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for rel in paths:
        try:
            out[rel] = jobfix.sha256_hex((root / rel).read_bytes())
        except FileNotFoundError:
            out[rel] = None
    return out


def apply_fix(fix: jobfix.Fix, root: Path, pod: str) -> list[jobfix.FileDecision]:
    """Write the fix into ``root`` where every file may take it (:func:`jobfix.decide`);
    where one may not, nothing is written. The decisions, refusals first."""
    paths = [entry.path for entry in fix.manifest.files]
    decisions = jobfix.decide(fix.manifest, local_digests(root, paths), pod)
    refused = [d for d in decisions if d.verdict is jobfix.Verdict.REFUSE]
    if refused:
        return refused + [d for d in decisions if d not in refused]
    for decision in decisions:
        if decision.verdict is jobfix.Verdict.APPLY:
            _write(root / decision.path, fix.contents[decision.path])
    return decisions


def _write(path: Path, content: bytes) -> None:
    """Replace ``path`` at once (a rank that reads it sees the old or the new file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
