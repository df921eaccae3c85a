"""The success path against generated hostile arguments: a decorated call that succeeds
returns what the plain call returns, and no code of its arguments runs because of podcode.

Every dunder of the classes below counts its calls in :data:`CALLS` (or raises): equality,
hashing, attribute access, iteration, length, pickling and copying hooks, ``__class__``
and ``__dict__`` properties, NumPy's ``__array_finalize__``, a metaclass's ``__eq__``,
``__hash__``, ``__getattribute__``, ``__instancecheck__`` and ``__subclasscheck__``, and
names that are not strings. They are mixed, nested, with subclasses of every trusted type
and with the standard library's containers. The property: a real ``@vscode`` task
(``PODCODE_ENABLE=1``, ``PODCODE_IDE=none``, a fresh ``PODCODE_HOME``) returns the plain
call's value, and the counters move by exactly what the plain call moved them.

Each shape that once failed stays below as a named test.
"""

from __future__ import annotations

import argparse
import array
import collections
import dataclasses
import enum
import functools
import os
import pickle
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interactive import vscode
from interactive.inputs import snapshot

CALLS: collections.Counter[str] = collections.Counter()
"""Calls of the hostile methods, by name."""


def counting(name: str, result: Any = None) -> Callable[..., Any]:
    def method(*args: Any, **kwargs: Any) -> Any:
        CALLS[name] += 1
        return result

    method.__name__ = name
    return method


def raising(name: str) -> Callable[..., Any]:
    def method(*args: Any, **kwargs: Any) -> Any:
        CALLS[name] += 1
        raise RuntimeError(f"{name} ran")

    method.__name__ = name
    return method


class Name(str):
    """A name that counts every use of its own code."""

    __eq__ = raising("Name.__eq__")  # type: ignore[assignment]
    __hash__ = raising("Name.__hash__")  # type: ignore[assignment]
    __str__ = raising("Name.__str__")  # type: ignore[assignment]
    __format__ = raising("Name.__format__")  # type: ignore[assignment]


HOOKS = {
    name: raising(name) for name in (
        "__eq__", "__hash__", "__len__", "__iter__", "__reduce__", "__reduce_ex__",
        "__getstate__", "__copy__", "__deepcopy__", "__sizeof__", "__getnewargs_ex__",
        "__getnewargs__", "__bool__", "__index__", "items", "keys", "__getitem__",
        "__array_finalize__", "__array__", "__fspath__",
    )
}


def _getattribute(self: Any, name: str) -> Any:
    CALLS["__getattribute__"] += 1
    return object.__getattribute__(self, name)


def _class(self: Any) -> Any:
    CALLS["__class__"] += 1
    return type(self)


def _dict(self: Any) -> Any:
    CALLS["__dict__"] += 1
    return {}


class Meta(type):
    __eq__ = raising("Meta.__eq__")  # type: ignore[assignment]
    __hash__ = raising("Meta.__hash__")  # type: ignore[assignment]
    __instancecheck__ = raising("Meta.__instancecheck__")  # type: ignore[assignment]
    __subclasscheck__ = raising("Meta.__subclasscheck__")  # type: ignore[assignment]

    def __getattribute__(cls, name: str) -> Any:
        CALLS["Meta.__getattribute__"] += 1
        return type.__getattribute__(cls, name)


def hostile(base: type = object, name: str = "Hostile", meta: type = type) -> type:
    """A class deriving from ``base`` whose every hook counts."""
    namespace: dict[str, Any] = {**HOOKS, "__getattribute__": _getattribute,
                                 "__getattr__": raising("__getattr__"),
                                 "__class__": property(_class), "__repr__": object.__repr__}
    if base is object:
        namespace["__dict__"] = property(_dict)
    return meta(name, (base,), namespace)


Plain = hostile()
WithMeta = hostile(meta=Meta, name="WithMeta")
ModuleFive = hostile(name="ModuleFive")
ModuleFive.__module__ = 5  # type: ignore[assignment]
OddName = hostile(name="OddName")
type.__setattr__(OddName, "__qualname__", Name("OddName"))
type.__setattr__(OddName, "__module__", Name(__name__))


def _new(kind: type, *args: Any) -> Any:
    return kind.__new__(kind, *args) if args else object.__new__(kind)


SUBCLASSED = [
    (list, lambda kind: list.__new__(kind)), (dict, lambda kind: dict.__new__(kind)),
    (tuple, lambda kind: tuple.__new__(kind, (1, [2]))), (set, lambda kind: set.__new__(kind)),
    (frozenset, lambda kind: frozenset.__new__(kind, (1,))),
    (bytearray, lambda kind: bytearray.__new__(kind)),
    (bytes, lambda kind: bytes.__new__(kind, b"ab")), (str, lambda kind: str.__new__(kind, "ab")),
    (int, lambda kind: int.__new__(kind, 7)), (float, lambda kind: float.__new__(kind, 1.5)),
    (collections.OrderedDict, lambda kind: collections.OrderedDict.__new__(kind)),
    (collections.defaultdict, lambda kind: collections.defaultdict.__new__(kind)),
    (collections.deque, lambda kind: collections.deque.__new__(kind)),
    (collections.Counter, lambda kind: dict.__new__(kind)),
    (collections.UserList, lambda kind: object.__new__(kind)),
    (collections.UserDict, lambda kind: object.__new__(kind)),
]
SUBCLASSES = [(hostile(base, f"Sub{base.__name__}"), make) for base, make in SUBCLASSED]


class ArraySub(np.ndarray):
    __array_finalize__ = counting("ArraySub.__array_finalize__")  # type: ignore[assignment]
    __reduce__ = raising("ArraySub.__reduce__")  # type: ignore[assignment]
    __reduce_ex__ = raising("ArraySub.__reduce_ex__")  # type: ignore[assignment]


@dataclasses.dataclass
class Config:
    rates: list[float]
    inner: Any = None


class Point(NamedTuple):
    x: Any
    y: int = 0


class Mode(enum.Enum):
    TRAIN = "train"
    TEST = "test"


def attribute_hook() -> Any:
    """Trusted containers carrying a hook as an instance attribute."""
    ordered = collections.OrderedDict(a=1)
    ordered.items = raising("OrderedDict.items attribute")  # type: ignore[method-assign]
    namespace = argparse.Namespace()
    setattr(namespace, "__reduce_ex__", raising("Namespace.__reduce_ex__ attribute"))
    return [ordered, namespace]


def record_with(value: Any) -> Any:
    records = np.zeros(2, dtype=[("a", "f8"), ("b", "O")])
    records[0]["b"] = value
    return records


def objects_with(value: Any) -> Any:
    objects = np.empty(2, dtype=object)
    objects[0] = value
    return objects


def function_with_odd_names() -> Any:
    function = counting("odd function")
    function.__module__ = Name("tests")
    function.__qualname__ = Name("odd")
    return function


FACTORIES: list[Callable[[], Any]] = [  # functions only: hypothesis hashes its samples
    lambda: Plain(), lambda: WithMeta(), lambda: ModuleFive(), lambda: OddName(),
    lambda: WithMeta, lambda: OddName,
    *[functools.partial(make, kind) for kind, make in SUBCLASSES],
    lambda: np.zeros(4).view(ArraySub), attribute_hook, function_with_odd_names,
    lambda: Config([0.5], Plain()), lambda: Point(Plain()), lambda: Mode.TRAIN,
    lambda: Plain().__sizeof__, lambda: counting("a function"),
    lambda: np.arange(6.0).reshape(2, 3)[:, ::2], lambda: np.array([1, "a"], dtype=object),
    lambda: array.array("i", [1, 2]), lambda: memoryview(bytearray(b"ab")),
]
WRAPPERS: list[Callable[[Any], Any]] = [
    lambda value: [value], lambda value: (value,), lambda value: {"k": value},
    lambda value: collections.UserList([value]), lambda value: collections.UserDict(k=value),
    lambda value: collections.ChainMap({"k": value}), lambda value: argparse.Namespace(k=value),
    lambda value: types.SimpleNamespace(k=value), lambda value: collections.deque([value]),
    lambda value: collections.defaultdict(list, k=[value]),
    lambda value: collections.OrderedDict(k=value), lambda value: Config([1.0], value),
    Point, record_with, objects_with, lambda value: functools.partial(len, value),
]


def _pandas_wrappers() -> list[Callable[[Any], Any]]:
    try:
        import pandas as pd
    except ImportError:
        return []
    return [lambda value: pd.DataFrame({"o": pd.Series([value, 1], dtype=object)})]


def _torch_factories() -> list[Callable[[], Any]]:
    try:
        import torch
    except ImportError:
        return []

    class TensorSub(torch.Tensor):
        __reduce_ex__ = raising("TensorSub.__reduce_ex__")  # type: ignore[assignment]

    def shadowed() -> Any:
        tensor = torch.ones(2)
        tensor.size = raising("Tensor.size attribute")  # type: ignore[method-assign]
        return tensor

    return [lambda: torch.ones(3), lambda: torch.ones(2).as_subclass(TensorSub), shadowed,
            lambda: torch.empty(2, device="meta"), lambda: torch.nn.Linear(2, 2)]


WRAPPERS += _pandas_wrappers()
FACTORIES += _torch_factories()

atoms = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.none(),
                  st.binary(max_size=3), st.booleans())
plans = st.recursive(
    st.one_of(atoms.map(lambda atom: ("atom", atom)),
              st.integers(0, len(FACTORIES) - 1).map(lambda index: ("make", index))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: ("list", items)),
        st.tuples(inner, inner).map(lambda pair: ("tuple", pair)),
        st.dictionaries(st.text(max_size=2), inner, max_size=3).map(lambda table: ("dict", table)),
        st.tuples(st.integers(0, len(WRAPPERS) - 1), inner).map(lambda pair: ("wrap", pair)),
    ), max_leaves=8)
"""How to build an argument: hypothesis draws these plain plans (it compares the types of
what it draws, which a hostile metaclass would answer), the test builds the objects."""
calls = st.tuples(st.lists(plans, max_size=3),
                  st.dictionaries(st.sampled_from(["a", "b", "c"]), plans, max_size=2))


def build(plan: tuple[str, Any]) -> Any:
    kind, data = plan
    if kind == "atom":
        return data
    if kind == "make":
        return FACTORIES[data]()
    if kind == "list":
        return [build(item) for item in data]
    if kind == "tuple":
        return tuple(build(item) for item in data)
    if kind == "dict":
        return {key: build(item) for key, item in data.items()}
    index, inner = data
    return WRAPPERS[index](build(inner))


def build_call(call: tuple[list[Any], dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
    args, kwargs = call
    return [build(plan) for plan in args], {name: build(plan) for name, plan in kwargs.items()}


def touch(*args: Any, **kwargs: Any) -> int:
    """The task: it reads a little of its inputs (moving the counters the same way in both
    runs), and returns a value that depends on them."""
    return len(args) * 10 + len(kwargs) + sum(type(value) is list for value in args)


@pytest.fixture(autouse=True)
def enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODCODE_ENABLE", "1")
    monkeypatch.setenv("PODCODE_IDE", "none")


def assert_same_behaviour(args: list[Any], kwargs: dict[str, Any], home: Path) -> None:
    decorated = vscode(touch)
    before = CALLS.copy()
    plain = touch(*args, **kwargs)
    after_plain = CALLS.copy()
    assert decorated(*args, **kwargs) == plain
    moved_by_plain = after_plain - before
    moved_by_decorated = CALLS - after_plain
    assert moved_by_decorated == moved_by_plain, dict(moved_by_decorated - moved_by_plain)
    assert not (home / "sessions").exists()  # nothing written by a call that succeeds


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls)
def test_a_decorated_call_returns_as_the_plain_one_and_runs_nothing(
    call: tuple[list[Any], dict[str, Any]],
) -> None:
    args, kwargs = build_call(call)
    assert_same_behaviour(args, kwargs, Path(os.environ["PODCODE_HOME"]))


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls, st.sampled_from([0, 64, 1 << 20]))
def test_the_snapshot_never_raises_nor_runs_the_inputs_code(
    call: tuple[list[Any], dict[str, Any]], budget: int,
) -> None:
    args, kwargs = build_call(call)
    before = CALLS.copy()
    taken = snapshot.take(tuple(args), kwargs, budget)
    assert before == CALLS
    if taken is None:
        return
    assert len(taken.arguments) == len(args) + len(kwargs)
    copied = 0
    for argument in taken.arguments:
        if argument.blob is not None:
            copied += len(argument.blob) + sum(
                memoryview(buffer).nbytes for buffer in argument.buffers
                if not memoryview(buffer).readonly)
        elif argument is not snapshot.UNCHANGEABLE:
            assert argument.not_kept
    assert copied <= budget  # the whole call's copy fits max_snapshot_bytes


# -- the shapes that once failed, each its own test -----------------------------------


def kept_or_named(value: Any, budget: int = 1 << 26) -> str:
    before = CALLS.copy()
    taken = snapshot.take((value,), {}, budget)
    assert before == CALLS, dict(CALLS - before)
    if taken is None:
        return "unchanging"
    [argument] = taken.arguments
    return "kept" if argument.blob is not None else str(argument.not_kept)


def test_a_class_whose_metaclass_defines_eq_is_named_not_hashed(podcode_home: Path) -> None:
    """It raised ``TypeError: unhashable type: 'Meta'`` into the task."""
    assert kept_or_named(WithMeta()).startswith("it is a tests.test_success_path_generated.")
    assert kept_or_named(WithMeta) == "unchanging"
    assert "whose metaclass" in kept_or_named([WithMeta])
    assert_same_behaviour([WithMeta(), [WithMeta]], {"k": WithMeta}, podcode_home)


def test_a_class_whose_module_is_not_a_string_is_named(podcode_home: Path) -> None:
    """It raised ``AttributeError: 'int' object has no attribute 'partition'``."""
    assert kept_or_named(ModuleFive()).startswith("it is a ModuleFive:")
    assert kept_or_named(OddName()).startswith("it is a tests.test_success_path_generated.OddName")
    assert "odd, which cannot be pickled by its name" in kept_or_named([function_with_odd_names()])
    assert_same_behaviour([ModuleFive(), OddName(), [ModuleFive]], {}, podcode_home)


def test_big_buffers_of_every_kind_are_named_before_a_byte_is_copied() -> None:
    """A 200 MB ``array.array`` (+224 ms a call) and ``ndarray`` subclass (+230 ms)."""
    assert "over max_snapshot_bytes" in kept_or_named(array.array("b", bytes(200 << 20)))
    assert "(a subclass of numpy.ndarray)" in kept_or_named(
        np.zeros(200 << 20, dtype=np.uint8).view(ArraySub))
    assert "over max_snapshot_bytes" in kept_or_named(memoryview(bytearray(200 << 20)))


def test_big_subclasses_and_stdlib_containers_cost_nothing() -> None:
    """A ``list`` subclass of 5M items (+100 ms) and a ``UserDict`` of 1M entries (+54 ms)
    were sized by their ``__dict__``."""
    listed = SUBCLASSES[0][0]
    big_list = listed()
    list.extend(big_list, range(5_000_000))
    assert "(a subclass of list)" in kept_or_named(big_list)
    assert "more than 256 KiB" in kept_or_named(collections.UserDict(
        {index: index for index in range(1_000_000)}))


@pytest.mark.parametrize("wrap", [
    lambda value: collections.UserList([value]), lambda value: argparse.Namespace(k=value),
    lambda value: collections.ChainMap({"k": value}), record_with, objects_with,
    lambda value: types.SimpleNamespace(k=value),
])
def test_a_hook_inside_a_trusted_container_never_runs(wrap: Callable[[Any], Any]) -> None:
    """An object with its own ``__reduce__`` inside ``UserList`` (6 calls), ``Namespace``
    (3), ``ChainMap``, a structured array's object field."""
    assert kept_or_named(wrap(Plain())).startswith("it ")


def test_a_pandas_object_column_runs_no_hook() -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"o": pd.Series([Plain(), 1], dtype=object)})
    assert kept_or_named(frame).startswith("it holds a tests.test_success_path_generated.")


def test_class_and_dict_properties_and_metaclass_hooks_never_run() -> None:
    for value in (Plain(), [Plain()], {"k": WithMeta()}, Point(WithMeta())):
        assert kept_or_named(value).startswith("it ")


def test_hooks_set_on_trusted_instances_never_run() -> None:
    assert "hide its class's methods" in kept_or_named(attribute_hook())


def test_what_is_kept_still_loads() -> None:
    value = {"mode": Mode.TEST, "rows": [1.5, None, "x"], "kind": Config,
             "deque": collections.deque([1]), "array": array.array("i", [3])}
    taken = snapshot.take((value,), {}, 1 << 20)
    assert taken is not None
    [argument] = taken.arguments
    assert argument.blob is not None, argument.not_kept
    assert pickle.loads(argument.blob, buffers=argument.buffers) == value
