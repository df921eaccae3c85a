"""The aligned pickle-buffer layout: one format for captures and cached outputs, and files
written before it was shared still load (and are written byte for byte the same)."""

from __future__ import annotations

import base64
import io
import json
import pickle
from pathlib import Path
from pickle import PickleBuffer

import pytest

from interactive.inputs.capture import inputs_folder, load_inputs, save_inputs
from interactive.storage import pickles
from interactive.storage.local_store import LocalStore
from interactive.storage.outputs import TaskCache, decode_entry, encode_entry

# Written by the code before the layout moved to interactive.storage.pickles: a capture of
# task(PickleBuffer(bytearray(b"abc" * 10)), {"k": PickleBuffer(bytearray(range(7))),
# "s": "text"}, flag=3) ...
OLD_DATA = "gAWXLoAFlRUAAAAAAAAAfZQojAFrlJeMAXOUjAR0ZXh0lHUugAVLAy4="
OLD_BUFFERS = (
    "YWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJjYWJjAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB"
    "AgMEBQY="
)
OLD_MANIFEST = {
    "format": 1,
    "task": "pkg.task",
    "created": 1795449878.5692692,
    "arguments": [
        {"name": "data", "kind": "positional", "offset": 0, "size": 4, "buffers": [0, 1]},
        {"name": "table", "kind": "positional", "offset": 4, "size": 32, "buffers": [1, 2]},
        {"name": "flag", "kind": "keyword", "offset": 36, "size": 5, "buffers": [2, 2]},
    ],
    "buffers": [[0, 30], [64, 7]],
}
# ... and a cache entry of {"a": PickleBuffer(bytearray(b"xyz" * 5)), "b": [1, "two"],
# "c": PickleBuffer(bytearray(100))}.
OLD_ENTRY = (
    "UE9EQ09ERS1DQUNIRQEDAAAAAAAAACoAAAAAAAAADwAAAAAAAABkAAAAAAAAABceSZEAAAAAAAAAAAAAAAAAAIAF"
    "lR8AAAAAAAAAfZQojAFhlJeMAWKUXZQoSwGMA3R3b5RljAFjlJd1LgAAAAAAAAAAAAAAAAAAAAAAAAAAAAB4eXp4"
    "eXp4eXp4eXp4eXoAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
)


def task(data, table, *, flag=0):  # noqa: ANN001, ANN201
    return data


def old_capture(home: Path) -> Path:
    folder = inputs_folder("pkg.task", home)
    folder.mkdir(parents=True)
    (folder / "data.bin").write_bytes(base64.b64decode(OLD_DATA))
    (folder / "buffers.bin").write_bytes(base64.b64decode(OLD_BUFFERS))
    (folder / "manifest.json").write_text(json.dumps(OLD_MANIFEST))
    return folder


def test_a_capture_written_before_still_loads(tmp_path: Path) -> None:
    old_capture(tmp_path / "home")
    args, kwargs = load_inputs("pkg.task", tmp_path / "home")
    assert bytes(args[0]) == b"abc" * 10
    assert bytes(args[1]["k"]) == bytes(range(7)) and args[1]["s"] == "text"
    assert kwargs == {"flag": 3}


def test_a_capture_is_written_byte_for_byte_as_before(tmp_path: Path) -> None:
    table = {"k": PickleBuffer(bytearray(range(7))), "s": "text"}
    report = save_inputs("pkg.task", task, (PickleBuffer(bytearray(b"abc" * 10)), table),
                         {"flag": 3}, tmp_path)
    assert (report.folder / "data.bin").read_bytes() == base64.b64decode(OLD_DATA)
    assert (report.folder / "buffers.bin").read_bytes() == base64.b64decode(OLD_BUFFERS)
    manifest = json.loads((report.folder / "manifest.json").read_text())
    assert {**manifest, "created": 0} == {**OLD_MANIFEST, "created": 0}


def test_a_cache_entry_written_before_still_loads(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    cache = TaskCache(store)
    store.put_bytes(cache.path("pkg.task/old"), base64.b64decode(OLD_ENTRY))
    hit, value = cache.get("pkg.task/old")
    assert hit and isinstance(value, dict)
    assert bytes(value["a"]) == b"xyz" * 5 and value["b"] == [1, "two"]
    assert bytes(value["c"]) == bytes(100)


def test_a_cache_entry_is_encoded_byte_for_byte_as_before() -> None:
    buffers: list[PickleBuffer] = []
    value = {"a": PickleBuffer(bytearray(b"xyz" * 5)), "b": [1, "two"],
             "c": PickleBuffer(bytearray(100))}
    payload = pickles.dumps(value, buffers)
    entry = b"".join(encode_entry([payload, *pickles.raw_buffers(buffers)]))
    assert entry == base64.b64decode(OLD_ENTRY)
    assert [bytes(part) for part in decode_entry(entry)][1:] == [b"xyz" * 5, bytes(100)]


@pytest.mark.parametrize("start", [0, 1, 38, 64, 100])
def test_parts_start_on_64_byte_boundaries_from_the_start(start: int) -> None:
    parts = [b"p" * 30, b"", b"q" * 7, bytes(range(200))]
    chunks, spans = pickles.lay_out(parts, start)
    body = b"".join(chunks)
    assert len(body) + start == pickles.end_of(spans, start)
    for (offset, length), part in zip(spans, parts, strict=True):
        assert offset % pickles.ALIGN == 0 and offset >= start and length == len(part)
        assert body[offset - start : offset - start + length] == part
    assert spans == pickles.place([len(part) for part in parts], start)
    padding = bytearray(body)
    for offset, length in spans:
        padding[offset - start : offset - start + length] = bytes(length)
    assert padding == bytes(len(body))  # between the parts: zero bytes only


def test_write_parts_and_views_round_trip() -> None:
    out = io.BytesIO()
    spans = pickles.write_parts(out, [b"a" * 3, b"b" * 65])
    assert spans == [(0, 3), (64, 65)]
    assert [bytes(view) for view in pickles.views(out.getvalue(), spans)] == [b"aaa", b"b" * 65]
    with pytest.raises(pickles.Truncated):
        pickles.views(out.getvalue()[:100], spans)


def test_dumps_collects_buffers_and_forgets_them_on_failure() -> None:
    buffers: list[PickleBuffer] = [PickleBuffer(b"earlier")]
    data = pickles.dumps([PickleBuffer(b"x" * 10)], buffers)
    assert len(buffers) == 2
    loaded = pickles.loads(data, pickles.raw_buffers(buffers[1:]))
    assert bytes(loaded[0]) == b"x" * 10

    class Unpicklable:
        def __reduce__(self) -> tuple[object, ...]:
            raise TypeError("no")

    with pytest.raises(TypeError):
        pickles.dumps([PickleBuffer(b"y"), Unpicklable()], buffers)
    assert len(buffers) == 2


def test_a_big_bytes_argument_loads_as_bytes(tmp_path: Path) -> None:
    blob = bytes(range(256)) * 8192  # 2 MiB: out of band
    report = save_inputs("t", task, (blob, {}), {}, tmp_path)
    assert (report.folder / "buffers.bin").stat().st_size == len(blob)
    args, _ = load_inputs("t", tmp_path)
    assert type(args[0]) is bytes and args[0] == blob


def test_map_file_is_private_copy_on_write(tmp_path: Path) -> None:
    path = tmp_path / "buffers.bin"
    path.write_bytes(b"0123456789")
    view = pickles.map_file(path)
    view[0] = ord("X")
    assert path.read_bytes() == b"0123456789" and bytes(view) == b"X123456789"
    (tmp_path / "empty.bin").write_bytes(b"")
    assert pickles.map_file(tmp_path / "empty.bin").nbytes == 0


def test_in_a_ray_process_a_class_shipped_by_value_is_pickled_by_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ray actor's ``self`` of a class from the driver's ``__main__``: plain pickle cannot
    name the class; Ray's cloudpickle (here the same library) pickles it by value."""
    import cloudpickle

    class Local:  # as unnameable for pickle as a class shipped by value
        def __init__(self) -> None:
            self.total = 5

    buffers: list[PickleBuffer] = []
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickles.dumps(Local(), buffers)  # outside Ray: as before
    monkeypatch.setattr(pickles, "_shipping_dumps", lambda: cloudpickle.dumps)
    data = pickles.dumps([PickleBuffer(b"z" * 8), Local()], buffers)
    loaded = pickles.loads(data, pickles.raw_buffers(buffers))
    assert loaded[1].total == 5 and bytes(loaded[0]) == b"z" * 8
