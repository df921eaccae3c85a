"""The success path decides by exact type while it copies: no code of the inputs' own
classes, every buffer sized before it is copied, and every argument that is not kept named
with its reason."""

from __future__ import annotations

import array
import collections
import copyreg
import dataclasses
import enum
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from interactive.inputs import sizing, snapshot
from interactive.inputs.capture import load_each, save_inputs

MIB = 1 << 20


@pytest.fixture
def sparse_file(tmp_path: Path) -> Path:
    """A 1 GiB file that takes no disk (and no memory until read)."""
    path = tmp_path / "big.bin"
    with open(path, "wb") as handle:
        handle.truncate(1 << 30)
    return path


def only(taken: snapshot.CallSnapshot | None) -> snapshot.Argument:
    assert taken is not None
    [argument] = taken.arguments
    return argument


def test_a_read_only_memmap_is_neither_copied_nor_read(sparse_file: Path) -> None:
    data = np.memmap(sparse_file, dtype=np.uint8, mode="r")
    assert sizing.unchanging(data) and sizing.unchanging((data[10:], np.asarray(data)))
    assert snapshot.take((data,), {"view": data[5:]}, 1 << 40) is None
    kept = only(snapshot.take(([data],), {}, 1 << 40))  # the list can change: kept
    assert kept.blob is not None and len(kept.blob) < 200
    [buffer] = kept.buffers  # the map by reference, read-only, not a copy
    assert buffer.raw().readonly and buffer.raw().nbytes == 1 << 30


def test_a_writable_memmap_is_on_disk_not_kept(sparse_file: Path) -> None:
    data = np.memmap(sparse_file, dtype=np.uint8, mode="r+")
    assert "holds a writable memory-mapped file" in str(
        only(snapshot.take(({"data": data},), {}, 1 << 40)).not_kept)
    assert "on disk" in str(only(snapshot.take((data,), {}, 1 << 40)).not_kept)


def test_a_bytearray_over_the_budget_is_not_copied() -> None:
    argument = only(snapshot.take((bytearray(200 * MIB),), {}, 0))
    assert argument.blob is None
    assert "200.0 MiB, over max_snapshot_bytes (0.0 MiB" in str(argument.not_kept)


def test_a_mid_sized_bytearray_is_named_for_its_size_not_as_objects() -> None:
    argument = only(snapshot.take((bytearray(512 << 10),), {}, 256 << 10))
    assert "it is 0.5 MiB, over max_snapshot_bytes" in str(argument.not_kept)
    assert only(snapshot.take((bytearray(512 << 10),), {}, 1 << 20)).blob is not None


def test_a_bytearray_within_the_budget_is_copied_out_of_band() -> None:
    data = bytearray(b"ab" * (1 << 20))
    argument = only(snapshot.take((data,), {}, 4 * MIB))
    assert argument.blob is not None and len(argument.blob) < 100  # not in band
    data[:2] = b"zz"
    assert pickle.loads(argument.blob, buffers=argument.buffers)[:2] == b"ab"


@pytest.mark.parametrize("build", [
    lambda: list(range(1_000_000)),
    lambda: {index: index for index in range(2_000_000)},
    lambda: [[index] for index in range(100_000)],
    lambda: {"rows": list(range(1_000_000))},
    lambda: (collections.deque(range(200_000)),),
])
def test_past_the_object_bound_an_argument_is_left_for_the_failure(build: Any) -> None:
    argument = only(snapshot.take((build(),), {}, 1 << 40))
    assert argument.blob is None
    assert "more than 256 KiB to pickle" in str(argument.not_kept)


def test_a_huge_top_level_container_is_stopped_before_it_is_pickled() -> None:
    value = list(range(5_000_000))
    started = time.perf_counter()
    argument = only(snapshot.take((value,), {}, 1 << 40))
    assert time.perf_counter() - started < 0.02  # pickling it would take ~70 ms
    assert "more than 256 KiB" in str(argument.not_kept)


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


@pytest.mark.parametrize(("value", "named"), [
    (Counted(), "a tests.test_sizing.Counted:"),
    (Interrupting(), "a tests.test_sizing.Interrupting:"),
    (Exiting(), "a tests.test_sizing.Exiting:"),
    (Items(a=1), "a tests.test_sizing.Items (a subclass of dict):"),
    (Registered(), "a tests.test_sizing.Registered:"),
])
def test_no_code_of_the_inputs_runs_at_the_call(value: Any, named: str) -> None:
    before = Counted.calls
    taken = snapshot.take(([value],), {"other": value}, 1 << 30)
    assert Counted.calls == before
    assert taken is not None
    holds, is_ = (argument.not_kept for argument in taken.arguments)
    assert holds is not None and holds.startswith(f"it holds {named}")
    assert is_ is not None and is_.startswith(f"it is {named}")
    assert all(argument.blob is None for argument in taken.arguments)


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


def test_instances_of_the_task_s_own_classes_are_named_and_left_for_the_failure(
    tmp_path: Path,
) -> None:
    """A dataclass or a plain class is not copied at the call (that would mean running
    or trusting its code): the session names it, and the capture at the failure pickles it."""

    def task(config: Config, slotted: Slotted) -> None: ...

    config, slotted = Config([0.1, 0.2]), Slotted()
    taken = snapshot.take((config, slotted), {}, 1 << 20)
    assert taken is not None
    first, second = (argument.not_kept for argument in taken.arguments)
    assert first is not None and first.startswith("it is a tests.test_sizing.Config: ")
    assert "never runs code of an argument's own classes" in first
    assert second is not None and "tests.test_sizing.Slotted" in second
    config.rates.append(9.0)
    report = save_inputs("t", task, (config, slotted), {}, tmp_path, snapshot=taken)
    assert report.saved == ["config", "slotted"] and list(report.at_failure) == [
        "config", "slotted"]
    assert "was not copied at the call (it is a tests.test_sizing.Config: " in report.notes()[0]
    args, _ = load_each(report.folder)
    assert args[0] == Config([0.1, 0.2, 9.0])  # as the task left it, and said so


def test_the_standard_library_s_containers_are_kept_without_their_code() -> None:
    namespace = __import__("argparse").Namespace(rates=[1.0])
    values = [collections.UserList([1]), collections.UserDict(a=[2]),
              collections.ChainMap({"b": 3}), collections.OrderedDict(c=4),
              collections.defaultdict(list, d=[5]), collections.deque([6], maxlen=3),
              collections.Counter("aab"), namespace, __import__("types").SimpleNamespace(e=7)]
    taken = snapshot.take(tuple(values), {}, 1 << 20)
    assert taken is not None
    for value, argument in zip(values, taken.arguments, strict=True):
        assert argument.blob is not None, argument.not_kept
        loaded = pickle.loads(argument.blob)
        assert type(loaded) is type(value) and loaded == value
    assert pickle.loads(taken.arguments[5].blob).maxlen == 3  # type: ignore[arg-type]


calls: list[str] = []


def ran(*args: Any) -> Any:
    calls.append("ran")
    return (list, ())


def test_an_attribute_that_hides_a_method_refuses_the_object_unrun() -> None:
    ordered = collections.OrderedDict(a=1)
    ordered.items = ran  # type: ignore[method-assign]  # OrderedDict's reduce calls items()
    namespace = __import__("argparse").Namespace()
    setattr(namespace, "__reduce_ex__", ran)  # pickled by name as state, never called
    taken = snapshot.take((ordered, namespace), {}, 1 << 20)
    assert taken is not None and calls == []
    assert "whose own attributes hide its class's methods" in str(taken.arguments[0].not_kept)
    assert vars(pickle.loads(taken.arguments[1].blob)) == {"__reduce_ex__": ran}  # type: ignore[arg-type]


class Color(enum.Enum):
    RED = 1


def test_classes_functions_and_enum_members_are_pickled_by_name() -> None:
    value = {"color": Color.RED, "kind": Config, "function": only, "builtin": len}
    argument = only(snapshot.take((value,), {}, 1 << 20))
    assert argument.blob is not None and pickle.loads(argument.blob) == value
    local = only(snapshot.take(([lambda: 1],), {}, 1 << 20))
    assert "<lambda>, which cannot be pickled by its name" in str(local.not_kept)
    assert snapshot.take((Color.RED, Config, only), {}, 1 << 20) is None  # cannot change


def test_a_lock_beside_a_list_is_named_and_the_list_kept() -> None:
    taken = snapshot.take(([1, 2, 3],), {"other": threading.Lock()}, 1 << 20)
    assert taken is not None
    kept, lock = taken.arguments
    assert kept.blob is not None and "it is a _thread.lock" in str(lock.not_kept)


def test_buffers_are_sized_before_a_byte_is_copied() -> None:
    """Over the budget, an ``array.array``, a ``memoryview``, a NumPy array (even one that
    is not contiguous) and a NumPy subclass are named in microseconds: nothing is read."""

    class Sub(np.ndarray):
        pass

    big = np.zeros(200 * MIB, dtype=np.uint8)
    values = [array.array("b", bytes(200 * MIB)), memoryview(bytearray(200 * MIB)), big,
              big[::2], big.view(Sub), np.ma.masked_array(big[: 4 * MIB])]
    for value in values:
        started = time.perf_counter()
        argument = only(snapshot.take((value,), {}, 64 * MIB))
        assert time.perf_counter() - started < 0.01, type(value)  # a copy: 20 ms or more
        assert argument.blob is None and argument.not_kept
    assert "(a subclass of numpy.ndarray)" in str(only(snapshot.take(
        (big.view(Sub),), {}, 1 << 40)).not_kept)


def test_array_array_and_memoryview_within_the_budget_are_copied_out_of_band() -> None:
    numbers, raw = array.array("d", range(1000)), bytearray(b"x" * 5000)
    taken = snapshot.take((numbers, memoryview(raw)), {}, 1 << 20)
    assert taken is not None
    numbers[0] = -1.0
    raw[0] = 0
    first, second = taken.arguments
    assert pickle.loads(first.blob, buffers=first.buffers)[0] == 0.0  # type: ignore[arg-type]
    assert bytes(pickle.loads(second.blob, buffers=second.buffers))[:1] == b"x"  # type: ignore[arg-type]


def test_a_non_contiguous_array_is_copied_once_and_read_only_arrays_kept_by_reference() -> None:
    base = np.arange(24.0).reshape(4, 6)
    frozen = np.arange(5.0)
    frozen.flags.writeable = False
    argument = only(snapshot.take(([base[:, ::2], frozen],), {}, 1 << 20))
    strided, kept = pickle.loads(argument.blob, buffers=argument.buffers)  # type: ignore[arg-type]
    base[:] = -1
    assert strided.tolist() == np.arange(24.0).reshape(4, 6)[:, ::2].tolist()
    assert kept.tolist() == frozen.tolist()
    address = np.frombuffer(argument.buffers[1].raw()).__array_interface__["data"][0]
    assert address == frozen.__array_interface__["data"][0]  # the array itself, not a copy


def test_arrays_of_python_objects_go_through_the_same_rules() -> None:
    kept = only(snapshot.take((np.array([1, "a", None], dtype=object),), {}, 1 << 20))
    assert kept.blob is not None
    assert pickle.loads(kept.blob).tolist() == [1, "a", None]
    hostile = only(snapshot.take((np.array([Counted()], dtype=object),), {}, 1 << 20))
    assert "it holds a tests.test_sizing.Counted" in str(hostile.not_kept)
    records = np.zeros(2, dtype=[("a", "f8"), ("b", "O")])
    assert "records holding Python objects" in str(
        only(snapshot.take((records,), {}, 1 << 20)).not_kept)


def test_pandas_and_arrow() -> None:
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"a": np.arange(1000.0), "b": np.arange(1000)})
    argument = only(snapshot.take((frame,), {}, 1 << 20))
    assert argument.blob is not None, argument.not_kept
    frame.loc[0, "a"] = -1.0
    assert pickle.loads(argument.blob, buffers=argument.buffers).loc[0, "a"] == 0.0
    assert snapshot.take((pa.table({"a": [1, 2]}),), {}, 1 << 20) is None
    texts = pd.DataFrame({"s": pd.Series(["x"] * 300_000, dtype=object)})
    assert "more than 256 KiB" in str(only(snapshot.take((texts,), {}, 1 << 30)).not_kept)
    own = pd.DataFrame({"o": pd.Series([Counted()], dtype=object)})
    named = only(snapshot.take((own,), {}, 1 << 20)).not_kept
    assert "it holds a tests.test_sizing.Counted" in str(named)


def test_torch_s_own_modules_are_kept_and_the_task_s_named() -> None:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 4)

    model = torch.nn.Linear(256, 256)
    argument = only(snapshot.take(({"model": model},), {}, 1 << 20))
    assert argument.blob is not None and sum(
        buffer.raw().nbytes for buffer in argument.buffers) == 256 * 257 * 4
    assert "Net" in str(only(snapshot.take((Net(),), {}, 1 << 20)).not_kept)
    meta = torch.nn.Linear(4, 4, device="meta")
    assert "a tensor on meta" in str(only(snapshot.take((meta,), {}, 1 << 20)).not_kept)


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


def test_an_error_of_podcode_s_own_costs_only_that_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(pickler: Any, obj: Any) -> Any:
        raise ZeroDivisionError("podcode's bug")

    monkeypatch.setitem(sizing._RULES, id(complex), (complex, broken))
    taken = snapshot.take(([1j], [2]), {}, 1 << 20)
    assert taken is not None
    failed, kept = taken.arguments
    assert "ZeroDivisionError: podcode's bug" in str(failed.not_kept) and kept.blob is not None

    def worse(value: Any) -> bool:
        raise ZeroDivisionError("worse")

    monkeypatch.setattr(sizing, "unchanging", worse)
    taken = snapshot.take(([1],), {}, 1 << 20)
    assert "podcode's snapshot of it failed (ZeroDivisionError: worse)" in str(
        only(taken).not_kept)


def test_an_interrupt_in_the_middle_propagates_as_without_podcode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C (or a SIGTERM handler that exits) while the snapshot is taken reaches the
    task's caller as it would without podcode; the next call works again."""

    def interrupted(pickler: Any, obj: Any) -> Any:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setitem(sizing._RULES, id(complex), (complex, interrupted))
        with pytest.raises(KeyboardInterrupt):
            snapshot.take(([1j],), {}, 1 << 20)
    assert only(snapshot.take(([1j],), {}, 1 << 20)).blob is not None


atoms = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.none(),
                  st.binary(max_size=5), st.complex_numbers(allow_nan=False))
nested = st.recursive(atoms, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=3), inner, max_size=4),
    st.lists(inner, max_size=4).map(collections.deque),
    st.dictionaries(st.text(max_size=3), inner, max_size=4).map(collections.OrderedDict),
    st.lists(inner, max_size=4).map(collections.UserList)), max_leaves=30)


@given(nested)
def test_what_is_kept_loads_back_equal(value: Any) -> None:
    taken = snapshot.take((value,), {}, 1 << 20)
    if sizing.unchanging(value):
        assert taken is None
        return
    argument = only(taken)
    assert argument.blob is not None, argument.not_kept
    assert pickle.loads(argument.blob, buffers=argument.buffers) == value
