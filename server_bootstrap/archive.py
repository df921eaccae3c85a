"""Extract a release tarball without letting any entry land outside its target.

Every member is resolved against the target before it is written: its path
through the symbolic links the archive itself makes (a link to a folder, then
members "through" it: chained links), a symbolic link's target from where the
link sits, a hard link's target from the top. One member that would leave the
target refuses the whole archive. This is the same on every Python. Then,
where tarfile has extraction filters (3.12+, 3.11.4+, 3.10.12+) the ``data``
filter checks again on the way out; elsewhere each member's real path on disk
is checked again just before it is written (that also catches links that were
in the target folder already).

:func:`safe_extract` checks every member before it writes anything (two passes
over a file). :func:`safe_extract_stream` reads the archive once, as it arrives
(a download), checking each member before writing it: an unsafe member stops it
with what came before already written, so its target must be a private staging
folder that the caller discards on failure, as the installer's is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, cast

from server_bootstrap.errors import UnsafeArchive
from server_bootstrap.inflate import Inflating, Readable

log = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b"
STREAM_BUFFER_BYTES = 1 << 20
"""Copy size while streaming (tarfile's default is 16 KiB)."""
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
    return list(_checked_in_order(archive, str(archive.name)))


def safe_extract(tarball: Path, target: Path) -> Path:
    """Extract ``tarball`` into ``target``; return the single top folder if there is one."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as archive:
        _extract(archive, check_members(archive), target)
    return single_top(target)


def safe_extract_stream(stream: Readable, target: Path, name: str) -> Path:
    """Extract the tarball (gzip, bz2, xz or plain) read once from ``stream`` into ``target``, each
    member checked before it is written; return the single top folder if there is one.

    An unsafe member raises :class:`UnsafeArchive` with the members before it written:
    ``target`` must be a folder that is discarded on failure."""
    target.mkdir(parents=True, exist_ok=True)
    first = stream.read(STREAM_BUFFER_BYTES)
    with contextlib.ExitStack() as stack:
        if first.startswith(GZIP_MAGIC):
            # inflated on a thread of its own while files are written here; read forward
            # only, which is all tarfile's "r:" mode needs (its "r|gz" stream mode
            # re-copies its buffer at every header)
            inflating = Inflating(stream, first)
            stack.callback(inflating.close)
            archive = stack.enter_context(tarfile.open(fileobj=cast(IO[bytes], inflating),
                                                       mode="r:"))
        else:  # plain, bz2 or xz: tarfile's stream mode
            inflating = None
            archive = stack.enter_context(tarfile.open(
                fileobj=cast(IO[bytes], _Prefixed(first, stream)), mode="r|*"))
        archive.copybufsize = STREAM_BUFFER_BYTES  # type: ignore[attr-defined]  # 3.8+
        _extract(archive, _checked_in_order(archive, name), target)
        if inflating is not None:
            inflating.drain()  # the stream read to its end: a download's checksum covers all
    return single_top(target)


class _Prefixed:
    """``stream`` with its ``first`` bytes already read."""

    def __init__(self, first: bytes, stream: Readable) -> None:
        self._head = first
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if not self._head:
            return self._stream.read(size)
        if size < 0:
            data, self._head = self._head + self._stream.read(), b""
            return data
        data, self._head = self._head[:size], self._head[size:]
        return data


def _checked_in_order(archive: tarfile.TarFile, name: str) -> Iterator[tarfile.TarInfo]:
    """The members as they come, each refused (with the whole archive) if unsafe."""
    tree = LinkTree()
    for member in archive:
        reason = unsafe_reason(member, tree)
        if reason:
            raise UnsafeArchive(f"refusing {name!r}: {reason}")
        yield member


def _extract(archive: tarfile.TarFile, members: Iterable[tarfile.TarInfo], target: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        # The standard "data" filter checks again (and drops setuid bits); it keeps +x.
        try:
            archive.extractall(target, members=members, filter="data")
        except tarfile.FilterError as exc:  # e.g. a link that was in the target already
            raise UnsafeArchive(f"refusing {archive.name!r}: {exc}") from None
        return
    # Python without extraction filters: each member checked on disk as it goes
    checked = _checked_on_disk(members, target)
    if hasattr(tarfile, "fully_trusted_filter"):  # filters, but no "data" (tests)
        archive.extractall(target, members=checked, filter="fully_trusted")  # noqa: S202
    else:
        archive.extractall(target, members=checked)  # noqa: S202


def _checked_on_disk(
    members: Iterable[tarfile.TarInfo], target: Path
) -> Iterator[tarfile.TarInfo]:
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
