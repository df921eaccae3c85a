"""The resume's patch step: planning and applying an edit in a process with a big heap.

podcode's patcher prepares nothing when a session opens (no registry of every code
object, no scan of the heap): it parses the two versions of each edited file when the
resume is asked for. A nested function that is alive on its own is found with one pass
over the heap, only when such a definition changed. Both are timed here on a heap of
a few million objects, median and min-max of several runs.
"""

from __future__ import annotations

import importlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from interactive.resume.patching import plan

FUNCTIONS = 200
HEAP_OBJECTS = 3_000_000


def _module_source(changed: bool) -> str:
    body = []
    for index in range(FUNCTIONS):
        value = "v * 3" if changed and index == FUNCTIONS // 2 else "v * 2"
        body.append(f"def f{index}(v):\n    return {value}\n\n")
    inner = "v + 2" if changed else "v + 1"
    body.append(f"def outer():\n    def inner(v):\n        return {inner}\n    return inner\n")
    return "".join(body)


def _time_patch(path: Path, old: str, new: str, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        path.write_text(new)
        started = time.perf_counter()
        plan([(path, old, new)]).apply()
        samples.append(time.perf_counter() - started)
        path.write_text(old)
        plan([(path, new, old)]).apply()
    return samples


def _entry(name: str, samples: list[float], goal: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": round(statistics.median(samples), 4),
        "min": round(min(samples), 4),
        "max": round(max(samples), 4),
        "runs": len(samples),
        "unit": "s",
        "baseline": None,
        "heap_objects": HEAP_OBJECTS,
        "goal": goal,
    }


def run(rounds: int = 5) -> list[dict[str, Any]]:
    heap = [(i, str(i)) for i in range(HEAP_OBJECTS // 2)]  # tuples and strings: ~3M objects
    folder = Path(tempfile.mkdtemp(prefix="podcode-bench-patch-"))
    path = folder / "bench_patched_module.py"
    old, new = _module_source(False), _module_source(True)
    path.write_text(old)
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("bench_patched_module")
        kept = module.outer()  # a live nested function: found through the heap
        top_new = _module_source(True).replace("v + 2", "v + 1")
        top = _time_patch(path, old, top_new, rounds)
        nested = _time_patch(path, old, new, rounds)
        assert kept(1) == 2 and len(heap) == HEAP_OBJECTS // 2
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("bench_patched_module", None)
        shutil.rmtree(folder, ignore_errors=True)
    return [
        _entry("patch_step_s", top, "<= 0.1 (part of resume_latency_s)"),
        _entry("patch_step_nested_live_s", nested, "<= 0.5 (one pass over the heap)"),
    ]
