"""Extensions: packing the companion, offline .vsix installs, URLs with checksums, ids."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from server_bootstrap.errors import ExtensionError
from server_bootstrap.extensions import (
    COMPANION_ID,
    SOURCE_STAMP,
    companion_vsix,
    install_companion,
    install_extensions,
    install_vsix,
    spec_kind,
)
from server_bootstrap.extensions import _run_cli as run_code_server_cli
from server_bootstrap.vsix import read_manifest
from tests.codeserver_fixture import Files, list_extensions, serve

SOURCE = Path(__file__).resolve().parents[1] / "vscode_config" / "extension"


def _vsix(path: Path, name: str = "demo", version: str = "1.0.0", extra: dict[str, bytes] | None
          = None) -> Path:
    package = {"name": name, "publisher": "Acme", "version": version,
               "engines": {"vscode": "^1.80.0"}, "main": "./extension.js"}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("extension/package.json", json.dumps(package))
        archive.writestr("extension/extension.js", "exports.activate = () => {};\n")
        for entry, data in (extra or {}).items():
            archive.writestr(entry, data)
    return path


def test_companion_vsix_holds_the_extension_source(tmp_path: Path) -> None:
    vsix = companion_vsix(tmp_path)
    assert vsix.name == "podcode.podcode-companion-0.1.0.vsix"
    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
        for source in SOURCE.rglob("*"):
            if source.is_file():
                name = f"extension/{source.relative_to(SOURCE).as_posix()}"
                assert archive.read(name) == source.read_bytes()
                names.discard(name)
        assert names == {"extension.vsixmanifest", "[Content_Types].xml"}
        assert 'Publisher="podcode"' in archive.read("extension.vsixmanifest").decode()
    manifest = read_manifest(vsix)
    assert manifest.id == COMPANION_ID and manifest.version == "0.1.0"
    again = companion_vsix(tmp_path / "again" / "x.vsix")
    assert again.read_bytes() == vsix.read_bytes()  # same sources, same bytes


def test_companion_package_declares_the_commands() -> None:
    package = json.loads((SOURCE / "package.json").read_text())
    titles = {(c["category"], c["title"]) for c in package["contributes"]["commands"]}
    assert {("podcode", "Resume workflow"), ("podcode", "Keep alive")} <= titles
    assert (SOURCE / package["main"]).is_file()


def test_install_vsix_unpacks_and_registers(tmp_path: Path) -> None:
    extensions = tmp_path / "extensions"
    extensions.mkdir()
    folder = install_vsix(_vsix(tmp_path / "demo.vsix"), extensions)
    assert folder == extensions / "acme.demo-1.0.0"
    assert (folder / "package.json").is_file() and (folder / "extension.js").is_file()
    registry = json.loads((extensions / "extensions.json").read_text())
    assert [(e["identifier"]["id"], e["version"], e["relativeLocation"]) for e in registry] == [
        ("acme.demo", "1.0.0", "acme.demo-1.0.0")
    ]
    assert registry[0]["location"]["path"] == str(folder.resolve())
    stamp = (folder / SOURCE_STAMP).read_text().strip()
    assert stamp == hashlib.sha256((tmp_path / "demo.vsix").read_bytes()).hexdigest()
    # Installing the same file again changes nothing; a new version replaces the old one.
    before = (extensions / "extensions.json").stat().st_mtime_ns
    install_vsix(tmp_path / "demo.vsix", extensions)
    assert (extensions / "extensions.json").stat().st_mtime_ns == before
    install_vsix(_vsix(tmp_path / "demo2.vsix", version="2.0.0"), extensions)
    registry = json.loads((extensions / "extensions.json").read_text())
    assert [e["relativeLocation"] for e in registry] == ["acme.demo-2.0.0"]
    assert sorted(p.name for p in extensions.iterdir() if not p.name.startswith(".")) == [
        "acme.demo-1.0.0", "acme.demo-2.0.0", "extensions.json"]


def test_install_keeps_other_extensions(tmp_path: Path) -> None:
    extensions = tmp_path / "extensions"
    install_extensions(Path("code-server"), extensions, [_vsix(tmp_path / "a.vsix", "a")])
    install_companion(extensions)
    registry = json.loads((extensions / "extensions.json").read_text())
    assert sorted(e["identifier"]["id"] for e in registry) == ["acme.a", COMPANION_ID]
    assert not [p for p in extensions.iterdir() if p.name.startswith(".")]


def test_vsix_entries_outside_the_extension_are_refused(tmp_path: Path) -> None:
    bad = _vsix(tmp_path / "bad.vsix", extra={"extension/../../evil.js": b"x"})
    with pytest.raises(ExtensionError, match="leaves the extension folder"):
        install_vsix(bad, tmp_path / "extensions")
    assert not (tmp_path / "evil.js").exists()


def test_not_a_vsix(tmp_path: Path) -> None:
    (tmp_path / "x.vsix").write_text("not a zip")
    with pytest.raises(ExtensionError, match="extension/package.json"):
        install_vsix(tmp_path / "x.vsix", tmp_path / "extensions")
    with pytest.raises(ExtensionError, match="no such .vsix"):
        install_vsix(tmp_path / "missing.vsix", tmp_path / "extensions")


def test_spec_kinds(tmp_path: Path) -> None:
    assert spec_kind(tmp_path / "a.vsix") == "vsix"
    assert spec_kind("relative/a.vsix") == "vsix"
    assert spec_kind("https://mirror.example/a.vsix#sha256=" + "0" * 64) == "url"
    assert spec_kind("ms-python.python") == "id"
    assert spec_kind("ms-python.python@2024.1.0") == "id"
    with pytest.raises(ExtensionError, match="expected a .vsix path"):
        spec_kind("no spaces allowed")


def test_install_from_a_url_checks_its_sha256(http_files: Files, tmp_path: Path) -> None:
    body = _vsix(tmp_path / "demo.vsix").read_bytes()
    url, sha = serve(http_files, "demo.vsix", body)
    extensions = tmp_path / "extensions"
    with pytest.raises(ExtensionError, match="needs its checksum"):
        install_extensions(Path("code-server"), extensions, [url])
    with pytest.raises(ExtensionError, match="has sha256"):
        install_extensions(Path("code-server"), extensions, [f"{url}#sha256={'1' * 64}"])
    assert not (extensions / "extensions.json").exists()
    folders = install_extensions(Path("code-server"), extensions, [f"{url}#sha256={sha}"])
    assert folders == [extensions / "acme.demo-1.0.0"]
    assert not [p for p in extensions.iterdir() if p.name.startswith(".")]


@pytest.mark.codeserver
def test_code_server_finds_the_fast_install_like_its_own(
    code_server_binary: Path, tmp_path: Path
) -> None:
    """Our unpack-and-register gives the registry entry code-server's installer writes,
    and code-server lists the extension."""
    vsix = companion_vsix(tmp_path)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    install_extensions(code_server_binary, ours, [vsix])
    done = run_code_server_cli(code_server_binary, theirs, ["--install-extension", str(vsix)])
    assert done.returncode == 0, done.stderr
    assert list_extensions(code_server_binary, ours) == [COMPANION_ID]
    mine = json.loads((ours / "extensions.json").read_text())[0]
    real = json.loads((theirs / "extensions.json").read_text())[0]
    for entry, folder in ((mine, ours), (real, theirs)):
        entry["metadata"].pop("installedTimestamp")
        for key in ("fsPath", "external", "path"):
            entry["location"][key] = entry["location"][key].replace(str(folder.resolve()), "DIR")
    assert mine == real
    installed = sorted(p.relative_to(ours / mine["relativeLocation"]).as_posix()
                       for p in (ours / mine["relativeLocation"]).rglob("*") if p.is_file())
    real_files = sorted(p.relative_to(theirs / real["relativeLocation"]).as_posix()
                        for p in (theirs / real["relativeLocation"]).rglob("*") if p.is_file())
    assert [f for f in installed if f != SOURCE_STAMP] == real_files


@pytest.mark.codeserver
def test_marketplace_ids_fail_clearly_offline(code_server_binary: Path, tmp_path: Path) -> None:
    with pytest.raises(ExtensionError, match="give a .vsix path or a URL"):
        install_extensions(code_server_binary, tmp_path / "ext", ["acme.not-reachable"])
