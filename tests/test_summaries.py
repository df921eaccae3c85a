"""A frame's locals, summarised within bounds: told by type and size, never printed whole
when big, whatever a value's own methods do."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from interactive.doors.summaries import (
    MAX_ANSWER_BYTES,
    MAX_LOCALS,
    summarise,
    summarise_locals,
)


class Huge:
    """A container of a billion items whose ``repr`` must never be called."""

    def __len__(self) -> int:
        return 1_000_000_000

    def __iter__(self) -> Iterator[int]:
        return iter(range(10**9))

    def __repr__(self) -> str:
        raise AssertionError("repr of a big container was called")


class Broken:
    def __repr__(self) -> str:
        raise RuntimeError("no repr today")


def test_big_values_are_told_by_type_and_size() -> None:
    assert summarise(list(range(1_000_000))) == "length=1000000 [0, 1, 2, 3, 4, ... 999995 more]"
    assert summarise(Huge()).startswith("length=1000000000 [0, 1, 2, 3, 4, ...")
    text = "y" * 100_000
    assert summarise(text).startswith("length=100000 'yyy") and len(summarise(text)) < 600
    array = summarise(np.zeros((1000, 1000), dtype=np.float32))
    assert array.startswith("ndarray shape=(1000, 1000) dtype=float32") and "\n" not in array
    assert summarise(np.arange(3)).endswith("array([0, 1, 2])")  # a small one is shown
    nested = summarise({"rows": list(range(10**6)), "n": 3})
    assert nested == "length=2 {'rows': length=1000000 [0, 1, 2, 3, 4, ... 999995 more], 'n': 3}"


def test_a_dataframe_shows_its_shape_dtypes_and_head() -> None:
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"a": range(100_000), "b": [0.5] * 100_000})
    shown = summarise(frame)
    first, *rows = shown.splitlines()
    assert first == "DataFrame shape=(100000, 2); dtypes: a: int64, b: float64"
    assert len(rows) == 6 and rows[-1].split() == ["4", "4", "0.5"]  # a header and 5 rows
    assert summarise(frame["a"]).startswith("Series length=100000 dtype=int64")


def test_a_failing_repr_is_said_and_the_rest_goes_on() -> None:
    assert summarise(Broken()) == "<repr() of a Broken failed: RuntimeError: no repr today>"
    answer = summarise_locals({"bad": Broken(), "ok": 1}, 0)
    assert [v["summary"] for v in answer["locals"]][1] == "1"


def test_the_answer_is_bounded_and_counts_what_it_left_out() -> None:
    many = {f"v{i}": i for i in range(MAX_LOCALS + 50)}
    answer = summarise_locals(many, 2)
    assert (answer["frame"], len(answer["locals"]), answer["left_out"]) == (2, MAX_LOCALS, 50)
    wide = {f"s{i}": f"{i}" * 2000 for i in range(100)}
    bounded = summarise_locals(wide, 0)
    assert len(json.dumps(bounded).encode()) <= MAX_ANSWER_BYTES
    assert bounded["left_out"] == 100 - len(bounded["locals"]) > 0
