"""Fetch a URL to a file, or read it once as a stream, checking its sha256 as it goes."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from server_bootstrap.errors import ChecksumMismatch, InstallError
from server_bootstrap.progress import Progress

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
TIMEOUT_SECONDS = 60.0
_SCHEMES = ("http", "https", "file")


def check_url(url: str, setting: str) -> None:
    """Refuse anything but http(s):// and file:// URLs, naming the setting."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in _SCHEMES:
        raise InstallError(f"{setting}={redact_url(url)!r}: expected an http(s):// or file:// URL")


def download(
    url: str, dest: Path, *, sha256: str, setting: str = "URL", sha_setting: str = "sha256"
) -> Path:
    """Stream ``url`` into ``dest``; raise :class:`ChecksumMismatch` (and delete it) when
    its sha256 is not ``sha256``."""
    check_url(url, setting)
    digest = hashlib.sha256()
    shown = redact_url(url)
    progress = Progress(f"downloading {Path(urllib.parse.urlsplit(url).path).name}")
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
            total = int(response.headers.get("Content-Length") or 0) or None
            done = 0
            with dest.open("wb") as out:
                for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    progress.update(done, total)
    except OSError as exc:
        dest.unlink(missing_ok=True)
        raise InstallError(f"cannot download {shown} ({setting}): {exc}") from exc
    finally:
        progress.finish()
    if digest.hexdigest() != sha256.lower():
        dest.unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{shown} has sha256 {digest.hexdigest()}, expected {sha256.lower()} "
            f"({sha_setting}): check the file at {setting} and the expected checksum"
        )
    log.info("downloaded %s (%d bytes, sha256 ok)", shown, done)
    return dest


class VerifiedStream:
    """A download read once by its consumer, hashed as it is read; :meth:`verify` reads
    what is left and compares the sha256 of the whole."""

    def __init__(self, response: Any, url: str, sha256: str, settings: tuple[str, str]) -> None:
        self._response = response
        self._shown = redact_url(url)
        self._sha256 = sha256.lower()
        self._settings = settings
        self._digest = hashlib.sha256()
        self._total = int(response.headers.get("Content-Length") or 0) or None
        self._progress = Progress(f"downloading {Path(urllib.parse.urlsplit(url).path).name}")
        self.done = 0

    def read(self, size: int = -1) -> bytes:
        try:
            chunk: bytes = self._response.read(size)
        except OSError as exc:
            raise InstallError(
                f"cannot download {self._shown} ({self._settings[0]}): {exc}") from exc
        self._digest.update(chunk)
        self.done += len(chunk)
        self._progress.update(self.done, self._total)
        return chunk

    def verify(self) -> None:
        """Read to the end; raise :class:`ChecksumMismatch` unless the sha256 matches."""
        while self.read(CHUNK_BYTES):
            pass
        self._progress.finish()
        found = self._digest.hexdigest()
        if found != self._sha256:
            setting, sha_setting = self._settings
            raise ChecksumMismatch(
                f"{self._shown} has sha256 {found}, expected {self._sha256} "
                f"({sha_setting}): check the file at {setting} and the expected checksum"
            )
        log.info("downloaded %s (%d bytes, sha256 ok)", self._shown, self.done)


@contextlib.contextmanager
def streamed(
    url: str, *, sha256: str, setting: str = "URL", sha_setting: str = "sha256"
) -> Iterator[VerifiedStream]:
    """``url`` open for one read from start to end; the caller calls ``verify()`` before it
    trusts anything made from the bytes."""
    check_url(url, setting)
    try:
        response = urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS)  # noqa: S310
    except OSError as exc:
        raise InstallError(f"cannot download {redact_url(url)} ({setting}): {exc}") from exc
    with response:
        yield VerifiedStream(response, url, sha256, (setting, sha_setting))


def redact_url(url: str) -> str:
    """``url`` without a user or password (mirror credentials never reach a log)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
