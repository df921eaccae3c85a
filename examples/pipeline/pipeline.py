"""A small three-step pipeline whose middle step fails on a constant column.

Run it with ``PODCODE_ENABLE=1`` (set for you inside Kubernetes): when
``normalize`` fails, a debug session opens instead of the pod dying.
"""

from __future__ import annotations

import random
import time

import features

from interactive import vscode


@vscode(cache=True, cache_version="1")
def load(rows: int, seed: int = 7) -> dict[str, list[float]]:
    """The expensive upstream step: cached, so a re-run of the workflow skips it."""
    print(f"load: reading {rows} rows", flush=True)
    time.sleep(0.5)
    rng = random.Random(seed)  # noqa: S311 - demo data, not security
    return {
        "loss": [rng.random() for _ in range(rows)],
        "lr": [0.001] * rows,  # a constant column: normalize() divides by zero
    }


@vscode
def normalize(table: dict[str, list[float]]) -> dict[str, list[float]]:
    return {name: features.normalize(column) for name, column in table.items()}


def report(table: dict[str, list[float]]) -> str:
    return ", ".join(f"{name}: mean {sum(col) / len(col):+.3f}" for name, col in table.items())


if __name__ == "__main__":
    print("pipeline: done,", report(normalize(load(1000))), flush=True)
