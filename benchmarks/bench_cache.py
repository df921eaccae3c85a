"""Benchmarks of the output cache: input hashing speed and the cost of an entry.

``run()`` returns entries ``{"name", "value", "unit", "baseline", "goal"}`` with the
median, ``min`` and ``max`` of several interleaved runs (:mod:`benchmarks.harness`).
Every baseline is measured in the same run, on the same bytes:

- ``hash_throughput_ratio``: seconds of the ``blake3`` package hashing the same
  512 MiB of NumPy arrays itself (``blake3(max_threads=AUTO)``, one hasher per
  array, after the same C-order copy of the Fortran-ordered one: the same
  parallelism and the same bytes) divided by the seconds of ``hash_inputs`` over
  them. It is podcode's overhead over the library it calls: the typed records,
  the walk. Goal: at least 0.9 (at most 10 % over the library).
- ``hash_mib_per_s``: ``hash_inputs`` throughput in MiB/s. Baseline: reading the
  same bytes once from memory on as many threads as BLAKE3 uses (a NumPy sum of
  64-bit words per slice), the physical ceiling of any hash of them. No goal: it
  shows how far from the ceiling the hash is.
- ``cache_roundtrip_overhead_ratio``: ``TaskCache.put`` + ``get`` of a 128 MiB
  array in a local store divided by writing and reading the same bytes as a
  plain file (lower is better; goal: at most 3x, for pickling and checksums).

Run: ``python benchmarks/bench_cache.py``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from blake3 import blake3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import figure, interleaved, ratio, seconds  # noqa: E402
from interactive.storage.backends import open_store  # noqa: E402
from interactive.storage.hashing import hash_inputs  # noqa: E402
from interactive.storage.outputs import TaskCache  # noqa: E402

MIB = 1024 * 1024
HASH_MIB = 512
CACHE_MIB = 128
THREADS = os.cpu_count() or 1


def arrays(total_mib: int) -> list[np.ndarray[Any, Any]]:
    """Four float32 arrays of ``total_mib`` MiB in all, one of them Fortran-ordered."""
    rng = np.random.default_rng(0)
    side = int((total_mib * MIB // 4 // 4) ** 0.5)
    parts = [rng.random((side, side), dtype=np.float32) for _ in range(4)]
    parts[1] = np.asfortranarray(parts[1])
    return parts


def blake3_alone(parts: list[np.ndarray[Any, Any]]) -> list[str]:
    """The library by itself on the same bytes: one multithreaded hasher per array."""
    digests = []
    for part in parts:
        hasher = blake3(max_threads=blake3.AUTO)
        hasher.update(np.ascontiguousarray(part).reshape(-1).view(np.uint8))
        digests.append(hasher.hexdigest())
    return digests


def read_once(parts: list[np.ndarray[Any, Any]], pool: ThreadPoolExecutor) -> int:
    """Read every byte once, as they lie in memory, on ``THREADS`` threads (NumPy
    releases the GIL while it sums)."""
    slices = []
    for part in parts:
        words = part.reshape(-1, order="A").view(np.uint64)
        step = -(-words.size // THREADS)
        slices += [words[start : start + step] for start in range(0, words.size, step)]
    return sum(int(total) for total in pool.map(np.add.reduce, slices))


def bench_hashing() -> list[dict[str, Any]]:
    parts = arrays(HASH_MIB)
    size_mib = sum(part.nbytes for part in parts) / MIB
    hash_inputs(tuple(parts), {"lr": 0.1})  # first touch of the arrays, threads started
    ours, library = interleaved(
        lambda: seconds(lambda: hash_inputs(tuple(parts), {"lr": 0.1})),
        lambda: seconds(lambda: blake3_alone(parts)),
    )
    with ThreadPoolExecutor(THREADS) as pool:
        read = [seconds(lambda: read_once(parts, pool)) for _ in ours]
    return [
        ratio("hash_throughput_ratio", ours, library, speedup=True,
              unit="x blake3 alone (same threads)", goal=">= 0.9",
              baseline_is="the blake3 package alone, max_threads=AUTO, on the same bytes"),
        figure("hash_mib_per_s", [size_mib / s for s in ours], unit="MiB/s",
               baseline=[size_mib / s for s in read], digits=1,
               goal="none: the baseline is the ceiling",
               baseline_is=f"reading the same bytes from memory once, {THREADS} threads"),
    ]


def bench_cache_roundtrip() -> list[dict[str, Any]]:
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

        ours, baseline = interleaved(lambda: seconds(roundtrip), lambda: seconds(plain))
    return [
        ratio("cache_roundtrip_overhead_ratio", ours, baseline, speedup=False,
              unit="x plain file write+read", goal="<= 3.0",
              baseline_is="writing and reading the same bytes as a plain file")
    ]


def run() -> list[dict[str, Any]]:
    return bench_hashing() + bench_cache_roundtrip()


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
