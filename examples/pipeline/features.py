"""Feature helpers for the demo pipeline. ``normalize`` has a bug on constant columns."""

from __future__ import annotations

import statistics


def normalize(column: list[float]) -> list[float]:
    mean = statistics.fmean(column)
    std = statistics.pstdev(column)
    return [(value - mean) / std for value in column]
