"""A fix as the job's store carries it: signed chunks and a manifest, and where it may apply.

A fix is the set of files the engineer edited in the failing pod, each with the
sha256 it had there at the failure (its *base*; none for a file the fix creates).
The store refuses a value over 8 MiB (and resets the connection), so the files'
contents, one after the other, are cut into chunks of :data:`CHUNK_BYTES`. The
manifest names every file (path, size, sha256, base) and every chunk's sha256, the
generation it is for, the store namespace it was posted under and the pod that
posted it; it is signed with HMAC-SHA256 under the job's secret
(:mod:`interactive.distributed.jobsecret`). Since the manifest holds each chunk's
digest, the signature covers the chunks too: a pod accepts a fix only when the
signature matches (``hmac.compare_digest``), the manifest is for the namespace and
generation it asked for (an old fix replayed under a new key is refused), every
chunk matches its digest and every file its sha256.

A pod applies a file only where its own copy is the one the failing pod had at the
failure (:func:`decide`): a pod whose copy differs (another image, a local edit)
is refused with the file and the pod named, never silently overwritten.

Pure: no store and no file is touched here.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from interactive.base.errors import PodcodeError

CHUNK_BYTES = 1 << 20
"""One chunk of a fix's contents: well under the store's 8 MiB limit on a value."""
FORMAT = 1
"""The manifest's format; a manifest of another format is refused."""
_DOMAIN = b"podcode job fix v1\n"
"""Prefixed to what is signed, so the signature means nothing in any other use of the secret."""


class FixRefused(PodcodeError):
    """A fix read from the job's store is not applied: it is unsigned, altered, or not
    the one asked for. The message says which."""


@dataclass(frozen=True)
class FileEdit:
    """One edited file of a fix, as the failing pod posts it."""

    path: str
    """Relative to the task's workspace, ``/``-separated, never leaving it."""
    content: bytes
    base_sha256: str | None
    """Hex sha256 of the file in the failing pod at the failure; None: it did not exist."""


@dataclass(frozen=True)
class FileEntry:
    """One file as the manifest names it."""

    path: str
    size: int
    sha256: str
    """Of the fixed content."""
    base_sha256: str | None


@dataclass(frozen=True)
class Manifest:
    """What a fix holds, verified against the job's secret."""

    namespace: str
    generation: int
    pod: str
    """The pod that posted the fix (the failing pod)."""
    post: str
    """This posting's id: its chunks' keys hold it, so two postings never mix."""
    files: tuple[FileEntry, ...]
    chunks: tuple[str, ...]
    """Hex sha256 of each chunk, in order."""


@dataclass(frozen=True)
class Fix:
    """A fix read back and verified: its manifest and each file's content."""

    manifest: Manifest
    contents: Mapping[str, bytes]


class Verdict(enum.Enum):
    APPLY = "apply"
    """This pod's copy is the failing pod's at the failure: write the fixed content."""
    ALREADY = "already"
    """This pod's copy is already the fixed content (the failing pod itself, a shared volume)."""
    REFUSE = "refuse"
    """This pod's copy is another: leave it, and say so."""


@dataclass(frozen=True)
class FileDecision:
    path: str
    verdict: Verdict
    reason: str


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_path(path: str) -> str:
    """``path`` when it is relative and stays inside the workspace; else :class:`FixRefused`."""
    parts = path.split("/")
    if (
        not path
        or "\0" in path
        or "\\" in path
        or posixpath.isabs(path)
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise FixRefused(f"the fix names the file {path!r}, which is not a plain relative path")
    return path


def sign(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, _DOMAIN + body, hashlib.sha256).hexdigest()


def pack(
    edits: Sequence[FileEdit],
    *,
    secret: bytes,
    namespace: str,
    generation: int,
    pod: str,
    post: str,
    chunk_bytes: int = CHUNK_BYTES,
) -> tuple[bytes, list[bytes]]:
    """The signed manifest and the chunks of ``edits`` (store the chunks first, the
    manifest last: a reader that sees the manifest finds every chunk)."""
    paths = [check_path(edit.path) for edit in edits]
    if len(set(paths)) != len(paths):
        raise FixRefused("the fix names a file twice")
    blob = b"".join(edit.content for edit in edits)
    chunks = [blob[start:start + chunk_bytes] for start in range(0, len(blob), chunk_bytes)]
    body = {
        "format": FORMAT,
        "namespace": namespace,
        "generation": generation,
        "pod": pod,
        "post": post,
        "files": [
            {"path": edit.path, "size": len(edit.content), "sha256": sha256_hex(edit.content),
             "base_sha256": edit.base_sha256}
            for edit in edits
        ],
        "chunks": [sha256_hex(chunk) for chunk in chunks],
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return sign(secret, raw).encode() + b"\n" + raw, chunks


def _entry(item: object) -> FileEntry:
    if not isinstance(item, dict):
        raise TypeError("a file entry is not an object")
    base = item["base_sha256"]
    return FileEntry(check_path(str(item["path"])), int(item["size"]), str(item["sha256"]),
                     None if base is None else str(base))


def open_manifest(raw: bytes, *, secret: bytes, namespace: str, generation: int) -> Manifest:
    """The manifest ``raw`` holds, once its signature is checked with ``secret`` and it is
    found to be for ``namespace`` and ``generation``; else :class:`FixRefused`."""
    signature, _, body = raw.partition(b"\n")
    if not hmac.compare_digest(signature, sign(secret, body).encode()):
        raise FixRefused(
            f"the fix for generation {generation} in the job's store is not signed with this "
            f"pod's job secret (it was altered, or posted with another secret): not applied"
        )
    try:
        data = json.loads(body)
        if data["format"] != FORMAT:
            raise FixRefused(f"the fix's manifest has format {data['format']!r}, not {FORMAT}")
        manifest = Manifest(
            str(data["namespace"]), int(data["generation"]), str(data["pod"]), str(data["post"]),
            tuple(_entry(item) for item in data["files"]),
            tuple(str(digest) for digest in data["chunks"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise FixRefused(f"the fix's manifest cannot be read: {exc!r}") from None
    if (manifest.namespace, manifest.generation) != (namespace, generation):
        raise FixRefused(
            f"the fix read for generation {generation} under {namespace!r} was posted for "
            f"generation {manifest.generation} under {manifest.namespace!r}: not applied"
        )
    return manifest


def assemble(manifest: Manifest, chunks: Sequence[bytes | None]) -> Fix:
    """The fix, from its verified ``manifest`` and the chunks read for it (None: missing),
    each checked against its digest; else :class:`FixRefused` naming the chunk or file."""
    if len(chunks) != len(manifest.chunks):
        raise FixRefused(f"the fix has {len(chunks)} chunks, its manifest {len(manifest.chunks)}")
    for index, (chunk, digest) in enumerate(zip(chunks, manifest.chunks, strict=True)):
        if chunk is None:
            raise FixRefused(f"chunk {index} of the fix is missing from the job's store")
        if not hmac.compare_digest(sha256_hex(chunk), digest):
            raise FixRefused(f"chunk {index} of the fix was altered in the job's store")
    blob = b"".join(chunk for chunk in chunks if chunk is not None)
    if sum(entry.size for entry in manifest.files) != len(blob):
        raise FixRefused("the fix's files do not add up to its chunks")
    contents: dict[str, bytes] = {}
    start = 0
    for entry in manifest.files:
        content = blob[start:start + entry.size]
        start += entry.size
        if sha256_hex(content) != entry.sha256:
            raise FixRefused(f"the fix's {entry.path} does not match its sha256")
        contents[entry.path] = content
    return Fix(manifest, contents)


def _short(digest: str | None) -> str:
    return "absent" if digest is None else f"sha256 {digest[:12]}"


def decide_file(entry: FileEntry, local: str | None, pod: str, origin: str) -> FileDecision:
    """Whether ``pod``, whose copy of ``entry.path`` has sha256 ``local`` (None: it has
    none), applies the fix to it; ``origin`` is the pod that posted the fix."""
    if local == entry.sha256:
        return FileDecision(entry.path, Verdict.ALREADY,
                            f"pod {pod} already has the fixed {entry.path}")
    if local == entry.base_sha256:
        return FileDecision(entry.path, Verdict.APPLY,
                            f"pod {pod} applies the fix to {entry.path}")
    if entry.base_sha256 is None:
        why = f"pod {origin} had no {entry.path} at the failure, pod {pod} has one"
    elif local is None:
        why = f"pod {pod} has no {entry.path}, which pod {origin} had at the failure"
    else:
        why = (f"its copy ({_short(local)}) is not the one pod {origin} had at the failure "
               f"({_short(entry.base_sha256)})")
    return FileDecision(entry.path, Verdict.REFUSE,
                        f"pod {pod} does not apply the fix to {entry.path}: {why}")


def decide(manifest: Manifest, local: Mapping[str, str | None], pod: str) -> list[FileDecision]:
    """For each file of the fix, whether ``pod`` applies it: ``local`` maps each path to
    the sha256 of this pod's copy now (None, or no entry: the pod has no such file)."""
    return [
        decide_file(entry, local.get(entry.path), pod, manifest.pod) for entry in manifest.files
    ]
