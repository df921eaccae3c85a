"""The success path decides before it copies: sizes without pickling, no code of the
inputs' own classes, and every argument that is not kept named with its reason."""

from __future__ import annotations

import copyreg
import dataclasses
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from interactive.inputs import sizing, snapshot
from interactive.inputs.capture import load_each, save_inputs


@pytest.fixture
def sparse_file(tmp_path: Path) -> Path:
    """A 1 GiB file that takes no disk (and no memory until read)."""
    path = tmp_path / "big.bin"
    with open(path, "wb") as handle:
        handle.truncate(1 << 30)
    return path


def test_a_read_only_memmap_is_neither_copied_nor_read(sparse_file: Path) -> None:
    data = np.memmap(sparse_file, dtype=np.uint8, mode="r")
    assert sizing.estimate(data) == sizing.NOTHING_TO_KEEP
    assert sizing.estimate((data[10:], np.asarray(data))) == sizing.NOTHING_TO_KEEP
    in_a_list = sizing.estimate([data])  # the list can change: kept, the map by reference
    assert in_a_list.verdict == sizing.KEEP and in_a_list.nbytes < 100
    assert snapshot.take((data,), {"view": data[5:]}, 1 << 40) is None


def test_a_writable_memmap_is_on_disk_not_kept(sparse_file: Path) -> None:
    data = np.memmap(sparse_file, dtype=np.uint8, mode="r+")
    found = sizing.estimate({"data": data})
    assert found.verdict == sizing.ON_DISK and "on disk" in found.reason
    taken = snapshot.take((data,), {}, 1 << 40)
    assert taken is not None and taken.arguments[0].not_kept == found.reason


def test_a_bytearray_over_the_budget_is_not_copied() -> None:
    big = bytearray(200 << 20)
    assert sizing.estimate(big) == sizing.Estimate(sizing.KEEP, 200 << 20)
    taken = snapshot.take((big,), {}, 0)
    assert taken is not None
    [argument] = taken.arguments
    assert argument.blob is None and "200.0 MiB, over max_snapshot_bytes (0.0 MiB" in str(
        argument.not_kept)


def test_a_bytearray_within_the_budget_is_copied_out_of_band() -> None:
    data = bytearray(b"ab" * (1 << 20))
    taken = snapshot.take((data,), {}, 4 << 20)
    assert taken is not None
    [argument] = taken.arguments
    assert argument.blob is not None and len(argument.blob) < 100  # not in band
    data[:2] = b"zz"
    assert pickle.loads(argument.blob, buffers=argument.buffers)[:2] == b"ab"


@pytest.mark.parametrize("value", [
    list(range(1_000_000)),
    {index: index for index in range(2_000_000)},
    [[index] for index in range(20_000)],
])
def test_past_the_walk_bound_an_argument_is_captured_at_the_failure(value: Any) -> None:
    found = sizing.estimate(value)
    assert found.verdict == sizing.AT_FAILURE
    assert "more than 10,000 objects" in found.reason


class Counted:
    """An input whose pickling has a side effect."""

    calls = 0

    def __init__(self) -> None:
        self.items = [1, 2]

    def __reduce__(self) -> tuple[Any, ...]:
        Counted.calls += 1
        return (Counted, ())


class Interrupting:
    def __getstate__(self) -> dict[str, Any]:
        raise KeyboardInterrupt


class Exiting:
    def __deepcopy__(self, memo: dict[int, Any]) -> Exiting:
        raise SystemExit(3)


class Items(dict[str, int]):
    def items(self) -> Any:  # type: ignore[override]
        raise RuntimeError("ran")


class Registered:
    pass


def _reduce_registered(value: Registered) -> tuple[Any, ...]:
    raise RuntimeError("ran")


copyreg.pickle(Registered, _reduce_registered)


@pytest.mark.parametrize(("value", "method"), [
    (Counted(), "__reduce__"), (Interrupting(), "__getstate__"), (Exiting(), "__deepcopy__"),
    (Items(a=1), "items"), (Registered(), "a copyreg reducer"),
])
def test_no_code_of_the_inputs_runs_at_the_call(value: Any, method: str) -> None:
    before = Counted.calls
    taken = snapshot.take(([value],), {"other": value}, 1 << 30)
    assert Counted.calls == before
    assert taken is not None
    for argument in taken.arguments:
        assert argument.blob is None and method in str(argument.not_kept)


def test_an_input_that_raises_keyboard_interrupt_when_pickled_at_the_failure_is_named(
    tmp_path: Path,
) -> None:
    def task(first: object, second: object, third: list[int]) -> None: ...

    report = save_inputs("t", task, (Interrupting(), Exiting(), [1]), {}, tmp_path)
    assert report.failed == {"first": "KeyboardInterrupt: "} and report.saved == ["second", "third"]


@dataclasses.dataclass
class Config:
    rates: list[float]
    name: str = "run"


class Slotted:
    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values = [1, 2]


def test_plain_instances_are_walked_and_kept() -> None:
    config, slotted = Config([0.1, 0.2]), Slotted()
    taken = snapshot.take((config, slotted), {}, 1 << 20)
    assert taken is not None and all(argument.blob for argument in taken.arguments)
    config.rates.append(9.0)
    slotted.values.clear()
    blobs = [argument.blob for argument in taken.arguments]
    assert pickle.loads(blobs[0]) == Config([0.1, 0.2])  # type: ignore[arg-type]
    assert pickle.loads(blobs[1]).values == [1, 2]  # type: ignore[arg-type]


def test_a_lock_beside_a_list_is_named_and_the_list_kept() -> None:
    taken = snapshot.take(([1, 2, 3],), {"other": threading.Lock()}, 1 << 20)
    assert taken is not None
    kept, lock = taken.arguments
    assert kept.blob is not None and "could not be pickled" in str(lock.not_kept)


def test_pandas_and_arrow() -> None:
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"a": np.arange(1000.0), "b": np.arange(1000)})
    found = sizing.estimate(frame)
    assert found.verdict == sizing.KEEP and 16_000 <= found.nbytes <= 17_000
    assert sizing.estimate(pa.table({"a": [1, 2]})) == sizing.NOTHING_TO_KEEP
    texts = pd.DataFrame({"s": pd.Series(["x"] * 20_000, dtype=object)})
    assert sizing.estimate(texts).verdict == sizing.AT_FAILURE


def test_a_torch_module_is_walked_to_its_parameters() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(256, 256)
    found = sizing.estimate({"model": model})
    assert found.verdict == sizing.KEEP and found.nbytes >= 256 * 257 * 4
    meta = torch.nn.Linear(4, 4, device="meta")
    assert "on meta" in sizing.estimate(meta).reason


def test_the_restore_is_per_argument(tmp_path: Path) -> None:
    """One argument that cannot be saved no longer turns the restore off for the others."""

    def task(items: list[int], other: object) -> None: ...

    items, lock = [1, 2, 3], threading.Lock()
    taken = snapshot.take((items,), {"other": lock}, 1 << 20)
    items.append(99)
    report = save_inputs("t", task, (items,), {"other": lock}, tmp_path, snapshot=taken)
    assert list(report.failed) == ["other"] and "as the task left it" in report.notes()[0]
    args, kwargs = load_each(report.folder)
    assert args == [[1, 2, 3]] and kwargs["other"] is not None
    assert repr(kwargs["other"]) == "<not saved>"


atoms = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.none(),
                  st.binary(max_size=5))
nested = st.recursive(atoms, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=3), inner, max_size=4)), max_leaves=30)


@given(nested)
def test_what_is_kept_loads_back_equal(value: Any) -> None:
    found = sizing.estimate(value)
    taken = snapshot.take((value,), {}, 1 << 20)
    if found.verdict == sizing.UNCHANGEABLE:
        assert taken is None
        return
    assert found.verdict == sizing.KEEP and taken is not None
    [argument] = taken.arguments
    assert argument.blob is not None
    assert pickle.loads(argument.blob, buffers=argument.buffers) == value
