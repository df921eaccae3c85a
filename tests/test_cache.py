"""The output cache over a memory:// store and a local one: keys, hits, corrupt entries."""

from __future__ import annotations

import logging
import pickle
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from interactive.storage.backends import open_store
from interactive.storage.hashing import UnhashableInput
from interactive.storage.outputs import TaskCache, canonical_call, decode_entry, encode_entry
from interactive.storage.store import Store


@pytest.fixture
def store() -> Store:
    return open_store({"PODCODE_STORE": f"memory://podcode-cache-{uuid.uuid4().hex}"})


@pytest.fixture
def cache(store: Store) -> TaskCache:
    return TaskCache(store)


def train(data: object, lr: float = 0.1, *, epochs: int = 3) -> None:
    raise AssertionError("never called by the cache")


def test_round_trip(cache: TaskCache) -> None:
    key = cache.key("m.train", "1", (np.arange(5),), {"lr": 0.1})
    assert cache.get(key) == (False, None)
    cache.put(key, {"loss": np.float64(0.5), "weights": np.ones(3)})
    hit, value = cache.get(key)
    assert hit
    assert isinstance(value, dict) and value["loss"] == 0.5
    assert np.array_equal(value["weights"], np.ones(3))


def test_none_is_a_real_value(cache: TaskCache) -> None:
    key = cache.key("m.t", "1", (), {})
    cache.put(key, None)
    assert cache.get(key) == (True, None)


def test_key_depends_on_task_version_and_inputs(cache: TaskCache) -> None:
    base = cache.key("m.train", "1", (1,), {})
    assert base == cache.key("m.train", "1", (1,), {})
    assert base != cache.key("m.train", "2", (1,), {})
    assert base != cache.key("m.other", "1", (1,), {})
    assert base != cache.key("m.train", "1", (2,), {})
    assert base.startswith("m.train/")


def test_task_and_version_boundaries_are_unambiguous(cache: TaskCache) -> None:
    assert cache.key("ab", "c", (), {}) != cache.key("a", "bc", (), {})


def test_key_binds_the_call_to_the_signature(cache: TaskCache) -> None:
    keys = {
        cache.key("m.train", "1", (5,), {}, func=train),
        cache.key("m.train", "1", (5, 0.1), {}, func=train),
        cache.key("m.train", "1", (), {"data": 5, "epochs": 3}, func=train),
    }
    assert len(keys) == 1
    assert cache.key("m.train", "1", (5,), {"epochs": 4}, func=train) not in keys


def test_canonical_call_keeps_varargs_and_names_them() -> None:
    def f(a: int, /, *rest: int, **extra: int) -> None: ...

    args, kwargs, names = canonical_call(f, (1, 2, 3), {"z": 4})
    assert args == (1, 2, 3) and kwargs == {"z": 4}
    assert names == ["a", "rest[0]", "rest[1]"]


def test_unhashable_input_is_refused_with_its_name(cache: TaskCache) -> None:
    with pytest.raises(UnhashableInput, match="argument 'data'"):
        cache.key("m.train", "1", (threading.Lock(),), {}, func=train)


def test_entries_survive_a_new_cache_object(store: Store) -> None:
    key = TaskCache(store).key("m.t", "1", ("x",), {})
    TaskCache(store).put(key, [1, 2])
    assert TaskCache(store).get(key) == (True, [1, 2])


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],
        lambda data: data[:-1] + bytes([data[-1] ^ 1]),
        lambda data: b"garbage",
        lambda data: b"",
        lambda data: data + b"extra",
    ],
    ids=["truncated", "flipped", "garbage", "empty", "trailing"],
)
def test_corrupt_entries_are_logged_misses(
    cache: TaskCache, store: Store, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    key = cache.key("m.t", "1", (), {})
    cache.put(key, list(range(100)))
    data = store.get_bytes(cache.path(key))
    assert data is not None
    store.put_bytes(cache.path(key), damage(data))  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="interactive.storage.outputs"):
        assert cache.get(key) == (False, None)
    assert "cache miss" in caplog.text and cache.path(key) in caplog.text
    cache.put(key, "fresh")
    assert cache.get(key) == (True, "fresh")


def test_entry_that_cannot_be_unpickled_is_a_miss(
    cache: TaskCache, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    key = cache.key("m.t", "1", (), {})
    payload = b"cnonexistent_module_for_podcode\nThing\n."
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(payload)
    store.put_bytes(cache.path(key), b"".join(encode_entry([payload])))
    with caplog.at_level(logging.WARNING, logger="interactive.storage.outputs"):
        assert cache.get(key) == (False, None)
    assert "ModuleNotFoundError" in caplog.text


def test_output_that_cannot_be_pickled_is_logged_and_not_stored(
    cache: TaskCache, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    key = cache.key("m.t", "1", (), {})
    with caplog.at_level(logging.WARNING, logger="interactive.storage.outputs"):
        cache.put(key, threading.Lock())
    assert "cannot be pickled" in caplog.text
    assert store.get_bytes(cache.path(key)) is None
    assert cache.get(key) == (False, None)


def test_unwritable_store_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = TaskCache(open_store({"PODCODE_STORE": str(blocker / "store")}))
    key = cache.key("m.t", "1", (), {})
    with caplog.at_level(logging.WARNING, logger="interactive.storage.outputs"):
        cache.put(key, 1)
        assert cache.get(key) == (False, None)
    assert "not cached" in caplog.text and "PODCODE_STORE" in caplog.text


def test_local_store_entry_lies_under_cache_folder(podcode_home: Path) -> None:
    cache = TaskCache(open_store())
    key = cache.key("pkg.train", "7", (1,), {})
    cache.put(key, "out")
    entries = list((podcode_home / "store" / "cache" / "pkg.train").iterdir())
    assert [entry.name for entry in entries] == [key.split("/")[1] + ".pkl"]


def test_entry_format_round_trip_and_alignment() -> None:
    data = b"".join(encode_entry([b"pickle", b"", bytes(range(100))]))
    parts = decode_entry(data)
    assert [bytes(part) for part in parts] == [b"pickle", b"", bytes(range(100))]
    start = np.frombuffer(data, np.uint8).ctypes.data
    for part in parts:
        if len(part):
            assert (np.frombuffer(part, np.uint8).ctypes.data - start) % 64 == 0


def test_large_arrays_come_back_writable_and_equal(cache: TaskCache, tmp_path: Path) -> None:
    local = TaskCache(open_store({"PODCODE_STORE": str(tmp_path / "store")}))
    for each in (cache, local):
        key = each.key("m.big", "1", (), {})
        array = np.arange(1_000_003, dtype=np.float64).reshape(-1, 1)
        fortran = np.asfortranarray(np.ones((300, 200)))
        each.put(key, {"a": array, "f": fortran, "meta": [1, "x"]})
        hit, value = each.get(key)
        assert hit and isinstance(value, dict)
        assert np.array_equal(value["a"], array) and np.array_equal(value["f"], fortran)
        assert value["a"].flags.writeable and value["a"].flags.aligned
        value["a"][0, 0] = -1.0
        assert value["meta"] == [1, "x"]
