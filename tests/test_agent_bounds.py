"""Every answer within its bound (interactive/agent/bounds.py), huge values included."""

from __future__ import annotations

import json

from interactive.agent.bounds import MAX_BYTES, bounded_json, clip, size


def test_a_million_element_list_stays_json_within_the_bound() -> None:
    data = {"locals": [{"name": f"v{i}", "summary": "x" * 50} for i in range(1_000_000)]}
    text = bounded_json(data)
    assert size(text) <= MAX_BYTES
    kept = json.loads(text)["locals"]
    assert kept[0] == {"name": "v0", "summary": "x" * 50}
    assert kept[-1].endswith("more not shown]") and str(1_000_000 - len(kept) + 1) in kept[-1]


def test_a_long_repr_is_cut_and_says_how_much() -> None:
    text = bounded_json({"summary": "1.5 " * 2_000_000})
    assert size(text) <= MAX_BYTES and "more characters not shown" in text
    assert json.loads(text)["summary"].startswith("1.5 1.5")


def test_text_is_clipped_at_a_character_boundary_with_a_note() -> None:
    text = "é" * MAX_BYTES
    clipped = clip(text)
    assert size(clipped) <= MAX_BYTES and clipped.endswith("capped at 32768 bytes]")
    assert clip("short") == "short"
