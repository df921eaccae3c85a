"""The store: local folders, memory:// through fsspec, atomic writes, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import fsspec
import pytest

from interactive.base.files import atomic_open
from interactive.storage.backends import open_store
from interactive.storage.fsspec_store import FsspecStore
from interactive.storage.local_store import LocalStore
from interactive.storage.store import PARTIAL_SUFFIX, Store, StoreError


def memory_url() -> str:
    return f"memory://podcode-test-{uuid.uuid4().hex}"


def partial_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(PARTIAL_SUFFIX)]


def test_default_store_is_under_podcode_home(tmp_path: Path) -> None:
    store = open_store({"PODCODE_HOME": str(tmp_path / "home")})
    assert store.is_local
    assert store.url == str(tmp_path / "home" / "store")


def test_default_store_follows_the_environment(podcode_home: Path) -> None:
    assert open_store().url == str(podcode_home / "store")


@pytest.mark.parametrize("prefix", ["", "file://"])
def test_local_store_round_trip(tmp_path: Path, prefix: str) -> None:
    store = open_store({"PODCODE_STORE": f"{prefix}{tmp_path}/s"})
    store.put_bytes("a/b/c.bin", b"hello")
    assert store.get_bytes("a/b/c.bin") == b"hello"
    assert (tmp_path / "s" / "a" / "b" / "c.bin").read_bytes() == b"hello"
    assert store.url_for("a/b/c.bin") == str(tmp_path / "s" / "a" / "b" / "c.bin")
    assert store.get_bytes("a/missing.bin") is None
    assert store.exists("a/b/c.bin") and not store.exists("a/missing.bin")


def test_overwrite_replaces_whole_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    store = open_store({"PODCODE_STORE": str(tmp_path)})
    store.put_bytes("x.bin", b"old" * 1000)
    store.put_bytes("x.bin", b"new")
    assert store.get_bytes("x.bin") == b"new"
    assert partial_files(tmp_path) == []


def test_put_file_copies(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(os.urandom(3 * 1024 * 1024))
    store = open_store({"PODCODE_STORE": str(tmp_path / "store")})
    store.put_file("ckpt/model.bin", source)
    assert store.get_bytes("ckpt/model.bin") == source.read_bytes()


def test_memory_store_round_trip(tmp_path: Path) -> None:
    url = memory_url()
    store = open_store({"PODCODE_STORE": url})
    assert not store.is_local
    store.put_bytes("a/b.bin", b"data")
    source = tmp_path / "f.txt"
    source.write_text("file")
    store.put_file("a/f.txt", source)
    assert store.get_bytes("a/b.bin") == b"data"
    assert store.get_bytes("a/f.txt") == b"file"
    assert store.get_bytes("a/none") is None
    assert store.url_for("a/b.bin") == f"{url}/a/b.bin"
    assert fsspec.filesystem("memory").cat_file(f"{url}/a/b.bin") == b"data"
    store.delete("a/b.bin")
    assert store.get_bytes("a/b.bin") is None


def test_rename_based_remote_store_leaves_no_temporary(tmp_path: Path) -> None:
    """A remote file system without atomic object PUTs: temporary name, then rename."""
    store = FsspecStore(str(tmp_path), fsspec.filesystem("file"))
    store.put_bytes("d/x.bin", b"1")
    store.put_bytes("d/x.bin", b"22")
    assert (tmp_path / "d" / "x.bin").read_bytes() == b"22"
    assert partial_files(tmp_path) == []


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside", "a/../../b", ""])
def test_paths_stay_inside_the_store(tmp_path: Path, bad: str) -> None:
    store = open_store({"PODCODE_STORE": str(tmp_path)})
    with pytest.raises(ValueError, match="inside the store"):
        store.put_bytes(bad, b"x")


def test_missing_driver_names_the_extra() -> None:
    pytest.importorskip("fsspec")
    try:
        import s3fs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("s3fs is installed here")
    with pytest.raises(StoreError, match=r"pip install s3fs") as info:
        open_store({"PODCODE_STORE": "s3://bucket/prefix"})
    assert "s3://bucket/prefix" in str(info.value)


def test_the_advice_is_installable_without_podcode_on_an_index() -> None:
    from interactive.storage.fsspec_store import missing_driver

    assert missing_driver("gs").startswith("Install gcsfs: pip install gcsfs ")
    assert "pip install './podcode[gcs]'" in missing_driver("gcs")
    assert "pip install podcode[" not in missing_driver("s3")
    assert missing_driver("weird") == "Install the fsspec driver for weird://"


def test_unknown_protocol_names_the_setting() -> None:
    with pytest.raises(StoreError, match="PODCODE_STORE"):
        open_store({"PODCODE_STORE": "nosuchproto://x"})


def test_store_under_a_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the store's folder should be")
    store = open_store({"PODCODE_STORE": str(blocker / "store")})
    with pytest.raises(StoreError) as info:
        store.put_bytes("cache/x.pkl", b"x")
    message = str(info.value)
    assert str(blocker / "store") in message and "cache/x.pkl" in message
    assert "PODCODE_STORE" in message
    assert blocker.read_text().startswith("a file")


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes into read-only folders; the store-under-a-file test covers root",
)
def test_read_only_folder_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "cache").mkdir(parents=True)
    (root / "cache").chmod(0o555)
    store = open_store({"PODCODE_STORE": str(root)})
    try:
        with pytest.raises(StoreError, match="writable") as info:
            store.put_bytes("cache/x.pkl", b"x")
        assert "cache/x.pkl" in str(info.value) and str(root) in str(info.value)
        assert list((root / "cache").iterdir()) == []
    finally:
        (root / "cache").chmod(0o755)


FILL_SCRIPT = """
import resource, signal, sys
from pathlib import Path
from interactive.storage.backends import open_store
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
store = open_store({"PODCODE_STORE": sys.argv[1]})
resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, 1024 * 1024))
try:
    store.put_bytes("ckpt/model.bin", b"n" * (4 * 1024 * 1024))
except Exception as exc:
    print(type(exc).__name__, exc)
    sys.exit(3)
"""


def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """A real short write: the file-size limit makes the disk refuse after 1 MiB."""
    root = tmp_path / "store"
    open_store({"PODCODE_STORE": str(root)}).put_bytes("ckpt/model.bin", b"old")
    script = tmp_path / "fill.py"
    script.write_text(textwrap.dedent(FILL_SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), str(root)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("StoreError") and "ckpt/model.bin" in done.stdout
    assert (root / "ckpt" / "model.bin").read_bytes() == b"old"
    assert partial_files(root) == []


def test_atomic_open_keeps_the_old_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(target, "w") as fh:
        fh.write("half")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert partial_files(tmp_path) == []


# -- sync of a local mirror with a remote store -----------------------------------------


def make_files(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def remote_listing(url: str) -> dict[str, bytes]:
    fs = fsspec.filesystem("memory")
    base = fs._strip_protocol(url)
    if not fs.exists(base):
        return {}
    return {name[len(base) + 1 :]: fs.cat_file(name) for name in fs.find(base)}


def test_sync_up_uploads_mirrors_deletes_and_skips_partials(tmp_path: Path) -> None:
    url = memory_url()
    store = open_store({"PODCODE_STORE": url})
    mirror = tmp_path / "mirror"
    make_files(mirror, {"a.pt": b"A", "sub/b.pt": b"B", ".c.pt.x1.partial": b"half"})
    store.sync_up(mirror, "checkpoints/t")
    assert remote_listing(f"{url}/checkpoints/t") == {"a.pt": b"A", "sub/b.pt": b"B"}

    (mirror / "sub" / "b.pt").unlink()
    make_files(mirror, {"a.pt": b"A2", "d.pt": b"D"})
    store.sync_up(mirror, "checkpoints/t")
    assert remote_listing(f"{url}/checkpoints/t") == {"a.pt": b"A2", "d.pt": b"D"}


def test_sync_up_uploads_only_what_changed(tmp_path: Path) -> None:
    url = memory_url()
    store = open_store({"PODCODE_STORE": url})
    mirror = tmp_path / "mirror"
    make_files(mirror, {"a.pt": b"A", "b.pt": b"B"})
    store.sync_up(mirror, "c")
    uploaded: list[str] = []
    original = store.put_file

    def counting_put_file(rel_path: str, local: Path) -> None:
        uploaded.append(rel_path)
        original(rel_path, local)

    store.put_file = counting_put_file  # type: ignore[method-assign]
    make_files(mirror, {"b.pt": b"B2"})
    store.sync_up(mirror, "c")
    assert uploaded == ["c/b.pt"]


def test_sync_down_fetches_new_and_changed_files_only(tmp_path: Path) -> None:
    url = memory_url()
    store = open_store({"PODCODE_STORE": url})
    source = tmp_path / "pod1"
    make_files(source, {"a.pt": b"A", "sub/b.pt": b"B"})
    store.sync_up(source, "ck")

    mirror = tmp_path / "pod2"
    store.sync_down("ck", mirror)
    assert (mirror / "a.pt").read_bytes() == b"A"
    assert (mirror / "sub" / "b.pt").read_bytes() == b"B"

    make_files(mirror, {"local-only.pt": b"L"})
    make_files(source, {"a.pt": b"A-newer"})
    store.sync_up(source, "ck")
    store.sync_down("ck", mirror)
    assert (mirror / "a.pt").read_bytes() == b"A-newer"
    assert (mirror / "local-only.pt").read_bytes() == b"L"
    assert partial_files(mirror) == []


def test_sync_down_of_an_empty_folder_makes_an_empty_mirror(tmp_path: Path) -> None:
    store = open_store({"PODCODE_STORE": memory_url()})
    store.sync_down("nothing/here", tmp_path / "m")
    assert [p.name for p in (tmp_path / "m").iterdir() if not p.name.startswith(".")] == []


@pytest.mark.parametrize("remote", [False, True])
def test_chunks_and_writable_buffers(tmp_path: Path, remote: bool) -> None:
    url = memory_url() if remote else str(tmp_path / "store")
    store = open_store({"PODCODE_STORE": url})
    store.put_chunks("e/x.bin", [b"ab", memoryview(b"cd"), bytearray(b"ef")], durable=False)
    buffer = store.get_buffer("e/x.bin")
    assert buffer == bytearray(b"abcdef")
    assert isinstance(buffer, bytearray)
    assert store.get_buffer("e/missing.bin") is None


# -- both kinds through the protocol ------------------------------------------------------


@pytest.fixture(params=["local", "memory", "rename"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A local folder, an object store (memory://, like s3://) and a file system written
    with a temporary name and a rename (fsspec's local driver, like hdfs://)."""
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    if request.param == "memory":
        return FsspecStore(memory_url(), fsspec.filesystem("memory"))
    return FsspecStore(str(tmp_path / "remote"), fsspec.filesystem("file"))


def test_open_store_chooses_the_kind(tmp_path: Path) -> None:
    assert isinstance(open_store({"PODCODE_STORE": str(tmp_path)}), LocalStore)
    assert isinstance(open_store({"PODCODE_STORE": f"file://{tmp_path}"}), LocalStore)
    assert isinstance(open_store({"PODCODE_STORE": memory_url()}), FsspecStore)


def test_every_store_writes_reads_lists_and_deletes(any_store: Store, tmp_path: Path) -> None:
    store = any_store
    store.make_dir("d")
    store.put_bytes("d/a.bin", b"A")
    store.put_chunks("d/sub/b.bin", [b"B", memoryview(b"b")], durable=False)
    source = tmp_path / "source.txt"
    source.write_bytes(b"file")
    store.put_file("d/c.txt", source)
    assert store.get_bytes("d/a.bin") == b"A" and store.get_buffer("d/sub/b.bin") == b"Bb"
    assert store.get_bytes("d/c.txt") == b"file"
    assert store.exists("d/a.bin") and not store.exists("d/none.bin")
    assert sorted(store.list_files("d")) == ["a.bin", "c.txt", "sub/b.bin"]
    assert store.list_files("nowhere") == {}
    store.put_bytes("d/a.bin", b"AA")
    assert store.get_bytes("d/a.bin") == b"AA"
    store.delete("d/a.bin")
    store.delete("d/a.bin")  # a missing file is fine
    assert store.get_bytes("d/a.bin") is None and store.get_buffer("d/a.bin") is None
    assert store.url_for("d/c.txt").startswith(store.url)


def test_every_store_keeps_paths_inside(any_store: Store) -> None:
    for bad in ("/etc/passwd", "../outside", ""):
        with pytest.raises(ValueError, match="inside the store"):
            any_store.put_bytes(bad, b"x")
        with pytest.raises(ValueError, match="inside the store"):
            any_store.url_for(bad)


def test_every_store_syncs_a_mirror_both_ways(any_store: Store, tmp_path: Path) -> None:
    pod1, pod2 = tmp_path / "pod1", tmp_path / "pod2"
    make_files(pod1, {"a.pt": b"A", "sub/b.pt": b"B"})
    any_store.sync_up(pod1, "ck")
    any_store.sync_down("ck", pod2)
    assert (pod2 / "a.pt").read_bytes() == b"A" and (pod2 / "sub" / "b.pt").read_bytes() == b"B"
    (pod1 / "a.pt").unlink()
    any_store.sync_up(pod1, "ck")
    assert sorted(any_store.list_files("ck")) == ["sub/b.pt"]


def test_only_a_local_store_has_local_paths(any_store: Store) -> None:
    if any_store.is_local:
        assert any_store.local_path("x/y.bin") == Path(any_store.url) / "x" / "y.bin"
    else:
        with pytest.raises(StoreError, match="sync_down"):
            any_store.local_path("x/y.bin")
