"""Extract a release tarball without letting any entry land outside its target."""

from __future__ import annotations

import logging
import posixpath
import tarfile
from pathlib import Path

from server_bootstrap.errors import UnsafeArchive

log = logging.getLogger(__name__)


def unsafe_reason(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` may not be extracted (None: it is safe). Pure: looks at names only."""
    name = member.name
    if name.startswith("/") or _escapes(name):
        return f"path {name!r} leaves the target folder"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return f"{name!r} is a device, fifo or other special file"
    if member.issym():
        target = posixpath.join(posixpath.dirname(name), member.linkname)
        if member.linkname.startswith("/") or _escapes(target):
            return f"symlink {name!r} -> {member.linkname!r} points outside the target folder"
    if member.islnk() and (member.linkname.startswith("/") or _escapes(member.linkname)):
        return f"hard link {name!r} -> {member.linkname!r} points outside the target folder"
    return None


def _escapes(name: str) -> bool:
    normal = posixpath.normpath(name)
    return normal == ".." or normal.startswith("../")


def check_members(archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, after refusing the whole archive if any one is unsafe."""
    members = archive.getmembers()
    for member in members:
        reason = unsafe_reason(member)
        if reason:
            raise UnsafeArchive(f"refusing {archive.name!r}: {reason}")
    return members


def safe_extract(tarball: Path, target: Path) -> Path:
    """Extract ``tarball`` into ``target``; return the single top folder if there is one."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as archive:
        members = check_members(archive)
        if hasattr(tarfile, "data_filter"):
            # The standard "data" filter checks again (and drops setuid bits); it keeps +x.
            archive.extractall(target, members=members, filter="data")
        else:  # Python without extraction filters: the checks above are the guard
            archive.extractall(target, members=members)  # noqa: S202
    return single_top(target)


def single_top(folder: Path) -> Path:
    entries = list(folder.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return folder
