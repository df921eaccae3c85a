"""Stable input hashes: across processes, by content, and refusing what they cannot read."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import os
import pathlib
import subprocess
import sys
import uuid
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interactive.storage.hashing import (
    PARALLEL_BYTES,
    UnhashableInput,
    hash_inputs,
)

REPO = pathlib.Path(__file__).resolve().parents[1]


def hash_value(value: object) -> str:
    """The digest of one value, by the rules of ``hash_inputs`` (as its only argument)."""
    return hash_inputs((value,), {})


@dataclasses.dataclass
class Config:
    lr: float
    layers: list[int]
    name: str = "base"


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Point(NamedTuple):
    x: int
    y: int


class Versioned:
    def __init__(self, version: str) -> None:
        self.version = version

    def __podcode_hash__(self) -> bytes:
        return self.version.encode()


SAMPLE_SCRIPT = """
import dataclasses, datetime, decimal, pathlib, uuid
import numpy as np
from interactive.storage.hashing import hash_inputs

@dataclasses.dataclass
class Config:
    lr: float
    layers: list
    name: str = "base"

args = (
    {"zeta", "alpha", "beta", "gamma"},
    {"b": 2, "a": [1, 2.5, None, True], "c": frozenset({"x", "y"})},
    np.arange(24, dtype=np.float32).reshape(4, 6).T,
    pathlib.Path("data/train.csv"),
    datetime.date(2024, 5, 1),
    decimal.Decimal("1.10"),
    uuid.UUID(int=7),
    b"\\x00\\xff",
    Config(0.1, [1, 2]),
)
print(hash_inputs(args, {"seed": 3, "tags": ("a", "b")}))
"""


def hash_in_child(seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    done = subprocess.run(
        [sys.executable, "-c", SAMPLE_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_stable_across_processes_with_different_hash_seeds() -> None:
    first, second = hash_in_child("1"), hash_in_child("4242")
    assert first == second
    assert len(first) == 64


def test_known_digest_does_not_drift() -> None:
    """Changing the encoding must change FORMAT; this pins version 2 (BLAKE3)."""
    value = hash_inputs((1, "a", [2.5, None]), {"k": {"x": b"y"}})
    assert value == GOLDEN


GOLDEN = "1f47040be8737ade2f180ae17e13495967618b5414f10c88ff80f6d37e7758c3"


def test_dicts_sets_and_keywords_ignore_order() -> None:
    assert hash_value({"a": 1, "b": 2}) == hash_value({"b": 2, "a": 1})
    assert hash_value({3, 1, 2}) == hash_value({2, 3, 1})
    assert hash_inputs((), {"a": 1, "b": 2}) == hash_inputs((), {"b": 2, "a": 1})


def test_order_counts_for_sequences_and_ordered_dicts() -> None:
    assert hash_value([1, 2]) != hash_value([2, 1])
    ordered = collections.OrderedDict
    assert hash_value(ordered(a=1, b=2)) != hash_value(ordered(b=2, a=1))
    assert hash_inputs((1, 2), {}) != hash_inputs((2, 1), {})


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (1, 1.0),
        (1, True),
        (0, False),
        ([1], (1,)),
        ("1", 1),
        (b"a", bytearray(b"a")),
        ({"lr": 0.1, "layers": [1], "name": "base"}, Config(0.1, [1])),
        (Point(1, 2), (1, 2)),
        (Color.RED, 1),
        (0.0, -0.0),
        (None, ()),
        ("ab", ["a", "b"]),
        (("a", "bc"), ("ab", "c")),
        ({"a": "b"}, {"b": "a"}),
    ],
)
def test_different_values_hash_differently(left: object, right: object) -> None:
    assert hash_value(left) != hash_value(right)


def test_positional_and_keyword_are_distinct() -> None:
    assert hash_inputs((1,), {}) != hash_inputs((), {"args[0]": 1})


def test_supported_values_hash_by_content() -> None:
    values = [
        Config(0.1, [1, 2]),
        Color.BLUE,
        Point(1, 2),
        pathlib.PurePosixPath("a/b"),
        datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        datetime.timedelta(days=1, seconds=2),
        decimal.Decimal("3.14"),
        uuid.uuid5(uuid.NAMESPACE_DNS, "podcode"),
        range(0, 10, 2),
        complex(1, -2),
        float("nan"),
        Versioned("v3"),
        np.float32(1.5),
        np.int64(7),
    ]
    for value in values:
        assert hash_value(value) == hash_value(_copy(value)), value


def _copy(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)


def test_paths_hash_by_text_not_content(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("1")
    before = hash_value(data)
    data.write_text("2")
    assert hash_value(data) == before
    assert hash_value(pathlib.Path("a/b")) == hash_value(pathlib.PurePosixPath("a/b"))


def test_custom_hash_method() -> None:
    assert hash_value(Versioned("1")) != hash_value(Versioned("2"))
    assert hash_value(Versioned("1")) != hash_value(b"1")


# -- NumPy -------------------------------------------------------------------------------


def test_arrays_hash_by_values_whatever_their_strides() -> None:
    base = np.arange(12, dtype=np.int64).reshape(3, 4)
    fortran = np.asfortranarray(base)
    strided = np.arange(24, dtype=np.int64).reshape(3, 8)[:, ::2] // 2
    assert hash_value(base) == hash_value(fortran) == hash_value(base.copy())
    assert np.array_equal(strided, base)
    assert hash_value(strided) == hash_value(base)


def test_arrays_with_same_bytes_but_other_dtype_or_shape_differ() -> None:
    base = np.arange(12, dtype=np.int32)
    assert hash_value(base) != hash_value(base.reshape(3, 4))
    assert hash_value(base) != hash_value(base.view(np.float32))
    assert hash_value(base) != hash_value(base.astype(np.int64))
    assert hash_value(base) != hash_value(base.tolist())


def test_large_array_parallel_path_is_exact() -> None:
    size = 3 * PARALLEL_BYTES + 12345
    big = np.zeros(size, dtype=np.uint8)
    reference = hash_value(big)
    assert hash_value(big.copy()) == reference
    big[-1] = 1
    assert hash_value(big) != reference
    big[-1] = 0
    big[PARALLEL_BYTES * 2] = 1
    assert hash_value(big) != reference


def test_the_parallel_path_is_the_same_hash_as_one_thread() -> None:
    """BLAKE3's tree mode: the threads do not change the digest (the key is the same on
    a 2-core laptop and a 64-core node)."""
    from blake3 import blake3

    data = np.random.default_rng(1).integers(0, 255, 4 * PARALLEL_BYTES, dtype=np.uint8)
    assert blake3(data, max_threads=blake3.AUTO).digest() == blake3(data).digest()


def test_structured_datetime_and_object_arrays() -> None:
    structured = np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])
    assert hash_value(structured) == hash_value(structured.copy())
    renamed = np.array([(1, 2.0)], dtype=[("c", "i4"), ("b", "f8")])
    assert hash_value(structured) != hash_value(renamed)
    dates = np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]")
    assert hash_value(dates) == hash_value(dates.copy())
    objects = np.array([{"a": 1}, "x"], dtype=object)
    assert hash_value(objects) == hash_value(np.array([{"a": 1}, "x"], dtype=object))
    assert hash_value(objects) != hash_value(np.array([{"a": 2}, "x"], dtype=object))


# -- refusals ------------------------------------------------------------------------------


class Model:
    pass


def test_refuses_arbitrary_objects_naming_the_argument() -> None:
    with pytest.raises(UnhashableInput) as info:
        hash_inputs((1,), {"model": Model()}, names=["step"])
    message = str(info.value)
    assert "argument 'model'" in message and "test_hashing.Model" in message
    assert "cache=False" in message and "__podcode_hash__" in message
    assert info.value.argument == "model"


def test_refusal_names_the_nested_place() -> None:
    with pytest.raises(UnhashableInput) as info:
        hash_inputs(({"opt": [1, Model()]},), {}, names=["cfg"])
    message = str(info.value)
    assert "argument 'cfg' (type dict)" in message
    assert "cfg['opt'][1] is a tests.test_hashing.Model" in message


def test_refuses_unnamed_positional_and_functions() -> None:
    with pytest.raises(UnhashableInput, match=r"argument 'args\[1\]'"):
        hash_inputs((1, lambda: 0), {})


def test_refuses_cycles() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(UnhashableInput, match="contains itself"):
        hash_inputs((loop,), {})


def test_shared_references_are_not_cycles() -> None:
    shared = [1, 2]
    assert hash_value([shared, shared]) == hash_value([[1, 2], [1, 2]])


def test_refuses_ndarray_subclasses_and_bad_custom_hashes() -> None:
    class Bad:
        def __podcode_hash__(self) -> object:
            return 42

    with pytest.raises(UnhashableInput, match="numpy.asarray"):
        hash_value(np.ma.masked_array([1, 2], mask=[0, 1]))
    with pytest.raises(UnhashableInput, match="neither bytes nor str"):
        hash_value(Bad())


# -- properties ------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
values = st.recursive(
    scalars | st.frozensets(st.integers() | st.text(max_size=4), max_size=4),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


def typed(value: Any) -> Any:
    """A representation that is equal exactly when two values must hash alike."""
    if isinstance(value, dict):
        return ("dict", sorted((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, frozenset):
        return ("frozenset", sorted(map(repr, map(typed, value))))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, repr(value))


@settings(max_examples=200, deadline=None)
@given(values)
def test_property_copies_hash_alike(value: Any) -> None:
    assert hash_value(value) == hash_value(_copy(value))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), values, max_size=6), st.randoms())
def test_property_dict_order_does_not_matter(mapping: dict[str, Any], rnd: Any) -> None:
    items = list(mapping.items())
    rnd.shuffle(items)
    assert hash_value(mapping) == hash_value(dict(items))
    assert hash_inputs((), mapping) == hash_inputs((), dict(items))


@settings(max_examples=300, deadline=None)
@given(values, values)
def test_property_equal_hash_means_equal_typed_value(left: Any, right: Any) -> None:
    assert (hash_value(left) == hash_value(right)) == (repr(typed(left)) == repr(typed(right)))
