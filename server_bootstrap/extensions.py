"""VS Code extensions for the session's code-server: the companion, ``.vsix`` files,
URLs (sha256-checked) and marketplace ids.

A ``.vsix`` is installed by unpacking it into the extensions folder and adding
it to that folder's ``extensions.json``, the way code-server's own installer
does, without starting a second code-server: this keeps a session's start
close to a bare code-server start. Marketplace ids go through
``code-server --install-extension`` (they need a reachable marketplace).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from server_bootstrap.digest import sha256_of
from server_bootstrap.environ import without_secrets
from server_bootstrap.errors import ExtensionError, InstallError
from server_bootstrap.vsix import Manifest, pack, read_manifest, unpack

log = logging.getLogger(__name__)

COMPANION_ID = "podcode.podcode-companion"
SOURCE_STAMP = ".podcode-vsix-sha256"
"""In an unpacked extension: the sha256 of the .vsix it came from (skip re-installs)."""
CLI_TIMEOUT_SECONDS = 300.0
_URL_SHA = re.compile(r"^sha256=([0-9a-fA-F]{64})$")


def companion_source() -> Any:
    """The companion extension's source folder (package data of ``vscode_config``)."""
    return files("vscode_config").joinpath("extension")


def companion_vsix(dest: Path) -> Path:
    """Pack the companion extension into a ``.vsix`` in folder ``dest`` (or as file ``dest``
    when it ends in ``.vsix``). The same sources always give the same bytes."""
    source = companion_source()
    package = json.loads(source.joinpath("package.json").read_text(encoding="utf-8"))
    target = dest if dest.suffix == ".vsix" else dest / (
        f"{package['publisher']}.{package['name']}-{package['version']}.vsix"
    )
    return pack(source, target)


def install_companion(extensions_dir: Path) -> Path:
    """Pack and install the companion extension (a few milliseconds; nothing is
    rewritten when the installed copy came from the same bytes)."""
    extensions_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=extensions_dir, prefix=".companion-") as tmp:
        return install_vsix(companion_vsix(Path(tmp)), extensions_dir)


def install_extensions(
    binary: Path, extensions_dir: Path, specs: Sequence[str | Path]
) -> list[Path]:
    """Install each of ``specs`` into ``extensions_dir``; return the extension folders.

    A spec is a ``.vsix`` path, a URL ``https://…/x.vsix#sha256=HEX`` (the checksum
    is required), or a marketplace id ``publisher.name[@version]``.
    """
    extensions_dir.mkdir(parents=True, exist_ok=True)
    installed = []
    for spec in specs:
        kind = spec_kind(spec)
        if kind == "vsix":
            installed.append(install_vsix(Path(spec), extensions_dir))
        elif kind == "url":
            installed.append(_install_url(str(spec), extensions_dir))
        else:
            installed.append(_install_marketplace(binary, extensions_dir, str(spec)))
    return installed


def spec_kind(spec: str | Path) -> str:
    """``vsix``, ``url`` or ``id`` (pure: looks at the text only)."""
    text = str(spec)
    if urllib.parse.urlsplit(text).scheme in ("http", "https", "file") and "://" in text:
        return "url"
    if text.endswith(".vsix") or os.sep in text or Path(text).is_file():
        return "vsix"
    if re.match(r"^[\w-]+\.[\w.-]+(@[\w.+-]+)?$", text):
        return "id"
    raise ExtensionError(
        f"extension {text!r}: expected a .vsix path, a URL with #sha256=..., "
        "or an id publisher.name"
    )


def install_vsix(vsix: Path, extensions_dir: Path) -> Path:
    """Unpack ``vsix`` into ``extensions_dir`` and register it; a no-op when that exact
    file is already installed."""
    if not vsix.is_file():
        raise ExtensionError(f"extension {str(vsix)!r}: no such .vsix file")
    manifest = read_manifest(vsix)
    digest = sha256_of(vsix)
    extensions_dir.mkdir(parents=True, exist_ok=True)
    folder = extensions_dir / manifest.folder
    stamp = folder / SOURCE_STAMP
    if stamp.is_file() and stamp.read_text().strip() == digest and _registered(
        extensions_dir, manifest
    ):
        log.debug("extension %s is already installed", manifest.id)
        return folder
    staging = Path(tempfile.mkdtemp(prefix=f".{manifest.folder}-", dir=extensions_dir))
    try:
        unpack(vsix, staging)
        (staging / SOURCE_STAMP).write_text(digest + "\n")
        staging.chmod(0o755)
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    register(extensions_dir, manifest, folder)
    log.info("installed extension %s %s", manifest.id, manifest.version)
    return folder


def manifest_entry(manifest: Manifest, folder: Path, now_ms: int) -> dict[str, Any]:
    """One entry of ``extensions.json``, as code-server's installer writes it."""
    path = str(folder.resolve())
    return {
        "identifier": {"id": manifest.id},
        "version": manifest.version,
        "location": {
            "$mid": 1, "fsPath": path, "external": folder.resolve().as_uri(),
            "path": path, "scheme": "file",
        },
        "relativeLocation": folder.name,
        "metadata": {"installedTimestamp": now_ms, "pinned": True, "source": "vsix"},
    }


def _read_registry(extensions_dir: Path) -> list[dict[str, Any]]:
    try:
        entries = json.loads((extensions_dir / "extensions.json").read_text())
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _registered(extensions_dir: Path, manifest: Manifest) -> bool:
    return any(
        e.get("identifier", {}).get("id", "").lower() == manifest.id
        and e.get("relativeLocation") == manifest.folder
        for e in _read_registry(extensions_dir)
    )


def register(extensions_dir: Path, manifest: Manifest, folder: Path) -> None:
    """Put ``manifest`` in ``extensions.json`` (replacing other versions of it), atomically."""
    entries = [
        e for e in _read_registry(extensions_dir)
        if str(e.get("identifier", {}).get("id", "")).lower() != manifest.id
    ]
    entries.append(manifest_entry(manifest, folder, int(time.time() * 1000)))
    registry = extensions_dir / "extensions.json"
    partial = registry.with_name(".extensions.json.partial")
    partial.write_text(json.dumps(entries))
    partial.replace(registry)


def _install_url(spec: str, extensions_dir: Path) -> Path:
    url, _, fragment = spec.partition("#")
    match = _URL_SHA.match(fragment)
    if not match:
        raise ExtensionError(
            f"extension URL {_redact(url)!r} needs its checksum: append #sha256=<64 hex digits>"
        )
    with tempfile.TemporaryDirectory(dir=extensions_dir, prefix=".download-") as tmp:
        vsix = Path(tmp) / "extension.vsix"
        try:
            _download(url, vsix, sha256=match.group(1), setting="extension URL",
                     sha_setting="#sha256= in the extension URL")
        except InstallError as exc:
            raise ExtensionError(str(exc)) from exc
        return install_vsix(vsix, extensions_dir)


def _install_marketplace(binary: Path, extensions_dir: Path, spec: str) -> Path:
    name = spec.split("@", 1)[0].lower()
    known = [e for e in _read_registry(extensions_dir)
             if str(e.get("identifier", {}).get("id", "")).lower() == name]
    if known and "@" not in spec:
        return extensions_dir / str(known[0].get("relativeLocation", name))
    try:
        done = _run_cli(binary, extensions_dir, ["--install-extension", spec, "--force"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExtensionError(f"installing extension {spec!r} failed: {exc}") from exc
    found = [e for e in _read_registry(extensions_dir)
             if str(e.get("identifier", {}).get("id", "")).lower() == name]
    if done.returncode != 0 or not found:
        output = (done.stdout + done.stderr).strip()[-2000:]
        raise ExtensionError(
            f"installing extension {spec!r} from the marketplace failed ({output}); "
            "without a reachable marketplace, give a .vsix path or a URL with #sha256= instead"
        )
    return extensions_dir / str(found[0].get("relativeLocation", name))



def _run_cli(
    binary: Path, extensions_dir: Path, args: list[str]
) -> subprocess.CompletedProcess[str]:
    """``code-server ARGS`` on ``extensions_dir``, touching nothing in the home folder."""
    with tempfile.TemporaryDirectory(prefix="podcode-cli-") as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text("{}\n")
        command = [str(binary), "--config", str(config), "--user-data-dir", str(Path(tmp) / "data"),
                   "--extensions-dir", str(extensions_dir), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS,
                              env=without_secrets(os.environ))


def _redact(url: str) -> str:
    from server_bootstrap.download import redact_url  # the HTTP stack only when a URL is used

    return redact_url(url)


def _download(url: str, target: Path, **options: Any) -> Any:
    from server_bootstrap.download import download

    return download(url, target, **options)
