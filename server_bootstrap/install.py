"""Install code-server into the shared cache: from a release tarball or the npm registry.

Also ``podcode install [--dir D] [--method tarball|npm] [--version V]``
(``python -m server_bootstrap.install``), to fill an image or a shared cache
ahead of time.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys
import tarfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from server_bootstrap.archive import safe_extract_stream
from server_bootstrap.cancel import Cancel
from server_bootstrap.config import METHODS, CodeServerConfig
from server_bootstrap.download import redact_url, streamed
from server_bootstrap.errors import BootstrapError, InstallError, UnsafeArchive
from server_bootstrap.installs import atomic_install, binary_in, install_name
from server_bootstrap.npm import build_npm

log = logging.getLogger(__name__)

SIZES = {
    "npm": "about 255 MB to download, 800 MB on disk with Node 24, a few minutes",
    "tarball": "a release tarball, checked against its sha256: no build, less than npm",
}
"""What an install costs, by method (npm's measured with code-server 4.139.1 on
linux-amd64)."""
AVOID = ("to skip this wait: `podcode install` ahead of time, PODCODE_CODE_SERVER_CACHE "
         "pointing at a cache that has it, or code-server baked into the image "
         "(docs/deploy.md)")


def install_notice(config: CodeServerConfig) -> str:
    """One line for a session that installs code-server: what, how big, where, and how
    to never wait for it again."""
    method = config.resolved_method()
    source = "the npm registry" if method == "npm" else "a release tarball"
    where = config.cache.expanduser() / install_name(config.version)
    return (f"code-server {config.version} is not installed: installing it from {source} "
            f"into {where} ({SIZES.get(method, 'a large download')}); the debugger and "
            f"podcode resume/abort work meanwhile, VS Code joins when it is ready; {AVOID}")


def install(
    config: CodeServerConfig,
    *,
    method: str | None = None,
    version: str | None = None,
    target: Path | None = None,
    environ: Mapping[str, str] | None = None,
    cancel: Cancel | None = None,
) -> Path:
    """Install code-server (unless the cache already has it); return its binary.

    ``target`` is the cache folder (default ``config.cache``); the install lands
    in ``target/<version>-linux-<arch>/``. ``cancel`` stops an npm install (its processes
    are ended, nothing is kept: :class:`~server_bootstrap.cancel.InstallCancelled`); a
    tarball download is checked between steps only.
    """
    version = version or config.version
    method = config.resolved_method() if method in (None, "auto") else method
    cache = (target or config.cache).expanduser()
    info: dict[str, object] = {"version": version, "method": method}
    if method == "tarball":
        url = config.url_for(version)
        if not config.sha256:
            raise InstallError(
                f"a tarball install of {redact_url(url)} needs its sha256: "
                "set PODCODE_CODE_SERVER_SHA256 (or use the npm method)"
            )
        builder = functools.partial(build_tarball, url=url, sha256=config.sha256)
        info["source"] = redact_url(url)
    elif method == "npm":
        builder = functools.partial(build_npm, version=version, environ=environ, cancel=cancel)
        info["source"] = "npm"
    else:
        raise InstallError(f"PODCODE_CODE_SERVER_METHOD={method!r}: expected tarball or npm")
    (cancel or Cancel()).check("it started")
    return binary_in(atomic_install(cache, install_name(version), builder, info))


def build_tarball(staging: Path, *, url: str, sha256: str) -> Path:
    """Download, verify and extract a release tarball in ``staging``; the folder to keep.

    The tarball is extracted as it arrives (one pass, never stored whole), each member
    checked before it is written, into the private staging folder; the install is kept
    only once the sha256 of the whole download matches (the staging folder is removed
    otherwise). A download that is not the expected file says so first, whatever else
    is wrong with it."""
    shown = redact_url(url)
    with streamed(url, sha256=sha256, setting="PODCODE_CODE_SERVER_URL",
                  sha_setting="PODCODE_CODE_SERVER_SHA256") as stream:
        try:
            top = safe_extract_stream(stream, staging / "tree", shown)
        except (tarfile.TarError, UnsafeArchive, EOFError, OSError, zlib.error) as exc:
            stream.verify()  # a wrong or truncated download: its checksum says so first
            if isinstance(exc, UnsafeArchive):
                raise
            raise InstallError(f"{shown} is not a readable tarball: {exc}") from exc
        stream.verify()
    if not binary_in(top).is_file():
        raise InstallError(
            f"{shown} has no bin/code-server: is PODCODE_CODE_SERVER_URL a "
            "code-server release tarball (code-server-VERSION-linux-ARCH.tar.gz)?"
        )
    return top


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``podcode install``."""
    parser.add_argument("--dir", type=Path, default=None,
                        help="cache folder to install into (default: PODCODE_CODE_SERVER_CACHE)")
    parser.add_argument("--method", choices=[m for m in METHODS if m != "auto"], default=None,
                        help="tarball (a release tarball, sha256-checked) or npm")
    parser.add_argument("--version", dest="code_server_version", default=None,
                        help="code-server version (default: PODCODE_CODE_SERVER_VERSION)")
    parser.add_argument("--url", default=None, help="release tarball URL (a mirror); "
                        "{version} and {arch} are filled in")
    parser.add_argument("--sha256", default=None, help="the tarball's sha256")


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    """Carry out ``podcode install``; print the binary's path. 0 on success."""
    try:
        config = CodeServerConfig.from_environ(environ)
        overrides = {"tarball_url": args.url, "sha256": args.sha256}
        config = dataclasses.replace(config, **{k: v for k, v in overrides.items() if v})
        binary = install(config, method=args.method, version=args.code_server_version,
                         target=args.dir, environ=environ)
    except BootstrapError as exc:
        print(f"podcode: install failed: {exc}", file=sys.stderr)
        return 1
    print(binary)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podcode install", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
