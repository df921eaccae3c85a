"""Fetch a URL to a file, checking its sha256 while it streams."""

from __future__ import annotations

import hashlib
import logging
import urllib.parse
import urllib.request
from pathlib import Path

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


def redact_url(url: str) -> str:
    """``url`` without a user or password (mirror credentials never reach a log)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
