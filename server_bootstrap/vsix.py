"""``.vsix`` files: pack a folder into one, read its manifest, unpack it safely."""

from __future__ import annotations

import html
import json
import posixpath
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server_bootstrap.errors import ExtensionError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

_FIXED_TIME = (2020, 1, 1, 0, 0, 0)
"""Every entry gets this timestamp, so the same sources give the same bytes."""

CONTENT_TYPES = """<?xml version="1.0" encoding="utf-8"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
<Default Extension=".json" ContentType="application/json"/>
<Default Extension=".js" ContentType="application/javascript"/>
<Default Extension=".md" ContentType="text/markdown"/>
<Default Extension=".vsixmanifest" ContentType="text/xml"/>
</Types>
"""

MANIFEST = """<?xml version="1.0" encoding="utf-8"?>
<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011">
  <Metadata>
    <Identity Language="en-US" Id={name} Version={version} Publisher={publisher}/>
    <DisplayName>{display}</DisplayName>
    <Description xml:space="preserve">{description}</Description>
  </Metadata>
  <Installation>
    <InstallationTarget Id="Microsoft.VisualStudio.Code"/>
  </Installation>
  <Dependencies/>
  <Assets>
    <Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json"
           Addressable="true"/>
  </Assets>
</PackageManifest>
"""


@dataclass(frozen=True)
class Manifest:
    """What identifies an extension: ``publisher.name`` and its version."""

    publisher: str
    name: str
    version: str

    @property
    def id(self) -> str:
        return f"{self.publisher}.{self.name}".lower()

    @property
    def folder(self) -> str:
        return f"{self.id}-{self.version}"


def manifest_of(package: dict[str, Any], where: str) -> Manifest:
    try:
        return Manifest(str(package["publisher"]), str(package["name"]), str(package["version"]))
    except KeyError as exc:
        raise ExtensionError(f"{where}: package.json lacks {exc.args[0]!r}") from None


def _files(root: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            found.extend(_files(entry, f"{name}/"))
        elif entry.is_file() and not entry.name.startswith("."):
            found.append((name, entry))
    return found


def pack(source: Traversable, dest: Path) -> Path:
    """Write ``source`` (a folder with package.json) as the ``.vsix`` file ``dest``."""
    package = json.loads(source.joinpath("package.json").read_text(encoding="utf-8"))
    manifest = manifest_of(package, str(source))
    xml = MANIFEST.format(
        name=_quoteattr(manifest.name), version=_quoteattr(manifest.version),
        publisher=_quoteattr(manifest.publisher),
        display=html.escape(str(package.get("displayName", manifest.name)), quote=False),
        description=html.escape(str(package.get("description", "")), quote=False),
    )
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        _add(archive, "[Content_Types].xml", CONTENT_TYPES.encode())
        _add(archive, "extension.vsixmanifest", xml.encode())
        for name, entry in _files(source):
            _add(archive, f"extension/{name}", entry.read_bytes())
    partial.replace(dest)
    return dest


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def read_manifest(vsix: Path) -> Manifest:
    """The manifest of ``vsix`` (from ``extension/package.json``)."""
    try:
        with zipfile.ZipFile(vsix) as archive:
            package = json.loads(archive.read("extension/package.json"))
    except (OSError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtensionError(f"{vsix} is not a .vsix with extension/package.json: {exc}") from exc
    return manifest_of(package, str(vsix))


def unpack(vsix: Path, target: Path) -> None:
    """Extract the ``extension/`` part of ``vsix`` into the folder ``target`` (and its
    manifest as ``.vsixmanifest``, as code-server's installer does)."""
    with zipfile.ZipFile(vsix) as archive:
        if "extension.vsixmanifest" in archive.namelist():
            (target / ".vsixmanifest").write_bytes(archive.read("extension.vsixmanifest"))
        for info in archive.infolist():
            if not info.filename.startswith("extension/") or info.is_dir():
                continue
            relative = posixpath.normpath(info.filename[len("extension/"):])
            if relative.startswith(("../", "/")) or relative == "..":
                raise ExtensionError(f"{vsix}: entry {info.filename!r} leaves the extension folder")
            out = target / relative
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src:
                out.write_bytes(src.read())


def _quoteattr(value: str) -> str:
    """An XML attribute value with its quotes (html.escape: xml.sax pulls in the HTTP stack)."""
    return f'"{html.escape(value, quote=True)}"'
