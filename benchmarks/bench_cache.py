"""Benchmarks of the output cache: input hashing speed and the cost of an entry.

``run()`` returns entries ``{"name", "value", "unit", "baseline", "goal"}``.
Every baseline is measured in the same run, on the same bytes:

- ``hash_throughput_ratio``: throughput of ``hash_inputs`` over 512 MiB of
  NumPy arrays divided by that of ``hashlib.sha256`` over the same buffers
  (higher is better; goal: at least as fast as SHA-256).
- ``hash_mib_per_s``: ``hash_inputs`` throughput in MiB/s (baseline: SHA-256's).
- ``cache_roundtrip_overhead_ratio``: ``TaskCache.put`` + ``get`` of a 128 MiB
  array in a local store divided by writing and reading the same bytes as a
  plain file (lower is better; goal: at most 3x, for pickling and checksums).

Run: ``python benchmarks/bench_cache.py``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from interactive.cache import TaskCache
from interactive.hashing import hash_inputs
from interactive.store import open_store

MIB = 1024 * 1024
HASH_MIB = 512
CACHE_MIB = 128
REPEATS = 2


def best_seconds(call: Callable[[], object], repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def arrays(total_mib: int) -> list[np.ndarray[Any, Any]]:
    """Four float32 arrays of ``total_mib`` MiB in all, one of them Fortran-ordered."""
    rng = np.random.default_rng(0)
    side = int((total_mib * MIB // 4 // 4) ** 0.5)
    parts = [rng.random((side, side), dtype=np.float32) for _ in range(4)]
    parts[1] = np.asfortranarray(parts[1])
    return parts


def sha256_all(parts: list[np.ndarray[Any, Any]]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(np.ascontiguousarray(part).reshape(-1).view(np.uint8))
    return digest.hexdigest()


def bench_hashing() -> list[dict[str, object]]:
    parts = arrays(HASH_MIB)
    size_mib = sum(part.nbytes for part in parts) / MIB
    ours = best_seconds(lambda: hash_inputs(tuple(parts), {"lr": 0.1}))
    sha = best_seconds(lambda: sha256_all(parts))
    return [
        {
            "name": "hash_throughput_ratio",
            "value": round(sha / ours, 3),
            "unit": "x sha256",
            "baseline": 1.0,
            "goal": 1.0,
        },
        {
            "name": "hash_mib_per_s",
            "value": round(size_mib / ours, 1),
            "unit": "MiB/s",
            "baseline": round(size_mib / sha, 1),
            "goal": round(size_mib / sha, 1),
        },
    ]


def bench_cache_roundtrip() -> list[dict[str, object]]:
    value = np.random.default_rng(1).random(CACHE_MIB * MIB // 8)
    raw = value.tobytes()
    with tempfile.TemporaryDirectory() as folder:
        cache = TaskCache(open_store({"PODCODE_STORE": str(Path(folder) / "store")}))
        key = cache.key("bench.task", "1", (1,), {})

        def roundtrip() -> None:
            cache.put(key, value)
            hit, _ = cache.get(key)
            assert hit

        def plain() -> None:
            path = Path(folder) / "plain.bin"
            path.write_bytes(raw)
            path.read_bytes()

        ours = best_seconds(roundtrip)
        baseline = best_seconds(plain)
    return [
        {
            "name": "cache_roundtrip_overhead_ratio",
            "value": round(ours / baseline, 3),
            "unit": "x plain file write+read",
            "baseline": 1.0,
            "goal": 3.0,
        }
    ]


def run() -> list[dict[str, object]]:
    return bench_hashing() + bench_cache_roundtrip()


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
