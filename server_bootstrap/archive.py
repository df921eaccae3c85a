"""Extract a release tarball without letting any entry land outside its target.

Every member is resolved against the target before anything is written: its
path through the symbolic links the archive itself makes (a link to a folder,
then members "through" it: chained links), a symbolic link's target from where
the link sits, a hard link's target from the top. One member that would leave
the target refuses the whole archive. This is the same on every Python. Then,
where tarfile has extraction filters (3.12+, 3.11.4+, 3.10.12+) the ``data``
filter checks again on the way out; elsewhere each member's real path on disk
is checked again just before it is written (that also catches links that were
in the target folder already).
"""

from __future__ import annotations

import logging
import os
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from server_bootstrap.errors import UnsafeArchive

log = logging.getLogger(__name__)

MAX_LINK_HOPS = 40
"""Symbolic links followed to resolve one name (the kernel's own limit); more is a loop."""


class LinkTree:
    """The archive's symbolic links as they would be on disk, to resolve names through them.

    Keys are link paths already resolved (relative to the target, ``/``-separated);
    values are the link texts.
    """

    def __init__(self) -> None:
        self.links: dict[str, str] = {}

    def resolve(self, name: str, follow_last: bool = True) -> list[str] | None:
        """``name``'s path components inside the target after following the archive's
        links (the last component too, unless ``follow_last`` is False); None when the
        name leaves the target or loops."""
        if name.startswith("/"):
            return None
        parts: list[str] = []
        pending = name.split("/")
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    return None
                parts.pop()
                continue
            link = self.links.get("/".join([*parts, part]))
            if link is not None and (pending or follow_last):
                hops += 1
                if hops > MAX_LINK_HOPS or link.startswith("/"):
                    return None
                pending = link.split("/") + pending  # relative to the link's folder: parts
                continue
            parts.append(part)
        return parts

    def add(self, location: Sequence[str], target: str) -> None:
        self.links["/".join(location)] = target


def unsafe_reason(member: tarfile.TarInfo, tree: LinkTree | None = None) -> str | None:
    """Why ``member`` may not be extracted (None: it is safe), given the links of the
    members before it (``tree``, which learns this member's link if it is one)."""
    tree = LinkTree() if tree is None else tree
    name = member.name
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return f"{name!r} is a device, fifo or other special file"
    link = member.issym() or member.islnk()
    location = tree.resolve(name, follow_last=not link)
    if location is None:
        return f"path {name!r} leaves the target folder"
    if not location and not member.isdir():
        return f"{name!r} would replace the target folder itself"
    if member.issym():
        if member.linkname.startswith("/"):
            return f"symlink {name!r} -> {member.linkname!r} points outside the target folder"
        if tree.resolve("/".join([*location[:-1], member.linkname])) is None:
            return f"symlink {name!r} -> {member.linkname!r} points outside the target folder"
        tree.add(location, member.linkname)
    if member.islnk() and tree.resolve(member.linkname) is None:
        return f"hard link {name!r} -> {member.linkname!r} points outside the target folder"
    return None


def check_members(archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, after refusing the whole archive if any one is unsafe."""
    members = archive.getmembers()
    tree = LinkTree()
    for member in members:
        reason = unsafe_reason(member, tree)
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
            try:
                archive.extractall(target, members=members, filter="data")
            except tarfile.FilterError as exc:  # e.g. a link that was in the target already
                raise UnsafeArchive(f"refusing {archive.name!r}: {exc}") from None
        else:  # Python without extraction filters: each member checked on disk as it goes
            checked = _checked_on_disk(members, target)
            if hasattr(tarfile, "fully_trusted_filter"):  # filters, but no "data" (tests)
                archive.extractall(target, members=checked, filter="fully_trusted")  # noqa: S202
            else:
                archive.extractall(target, members=checked)  # noqa: S202
    return single_top(target)


def _checked_on_disk(members: list[tarfile.TarInfo], target: Path) -> Iterator[tarfile.TarInfo]:
    """``members``, each checked against the disk just before tarfile writes it (it pulls
    one at a time): its real path, and a link's real target, must be inside ``target``."""
    root = os.path.realpath(target)
    for member in members:
        path = os.path.join(root, member.name)
        if member.issym() or member.islnk():
            where = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
            base = os.path.dirname(where) if member.issym() else root
            pointed = os.path.realpath(os.path.join(base, member.linkname))
            checks = [where, pointed]
        else:
            checks = [os.path.realpath(path)]
        for real in checks:
            if os.path.commonpath([root, real]) != root:
                raise UnsafeArchive(f"refusing {member.name!r}: it resolves to {real}, "
                                    f"outside {root}")
        yield member


def single_top(folder: Path) -> Path:
    entries = list(folder.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return folder
