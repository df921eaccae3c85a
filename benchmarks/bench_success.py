"""The calls that succeed: what ``@vscode`` adds to a call, in time and in peak memory.

Each input is built in a fresh process (``PODCODE_ENABLE=1``), the decorated task is
called once (the process's first call prepares it), then timed over several calls; the
same process shape without the decorator is the baseline, run interleaved (A B B A).
Peak memory is the growth of the process's peak RSS (``VmHWM``, reset through
``/proc/self/clear_refs`` after the input is built) over the timed calls.

Goals (issue "never in the way"): where nothing is copied, <= 1 ms and <= 1 MiB more than
the undecorated call; where an argument is kept (``max_snapshot_bytes`` raised above it),
<= 1 ms plus twice a plain ``bytearray(memoryview(...))`` copy of the kept bytes measured
in the same process, and peak RSS <= the kept bytes + 1 MiB.

``success_path_overhead_us_<kind>`` (issue "a success path that costs no more than what it
keeps"): the microseconds ``@vscode`` adds to a call that succeeds, for the arguments of
:data:`PER_CALL`, against ``pickle.dumps`` (protocol 5) of the same argument timed in the
same process, interleaved: <= 10 us + 1.5 x that pickle where the snapshot keeps the
argument, <= 10 us where it is left for the failure (over the budget, or a class of the
task's own).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import RUNS, figure  # noqa: E402

CALLS = 5
MIB = 1 << 20
KEEP_ALL = str(4 << 30)
"""``max_snapshot_bytes`` for the cases that keep their argument."""

WORKER = r'''
import json, os, statistics, sys, time

def peak_reset():
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)

def build(name, path):
    import numpy as np
    if name == "memmap_1gib":
        return np.memmap(path, dtype=np.uint8, mode="r")
    if name.startswith("bytearray_200mb"):
        return bytearray(200 << 20)
    if name == "objects_1m":
        return [{"i": i} for i in range(1_000_000)]
    if name == "dict_2m":
        return {i: i for i in range(2_000_000)}
    if name.startswith("dataframe_100mb"):
        import pandas as pd
        rows = (100 << 20) // 8 // 4
        return pd.DataFrame(np.ones((rows, 4)), columns=list("abcd"))
    if name.startswith("tensor_100mb"):
        import torch
        return torch.ones((100 << 20) // 4)
    if name == "own_reduce":
        class Counted:
            calls = 0
            def __init__(self):
                self.payload = list(range(1000))
            def __reduce__(self):
                Counted.calls += 1
                time.sleep(0.05)  # a slow __getstate__ would add this to every call
                return (list, ())
        return Counted()
    raise KeyError(name)

def main(name, decorated, path):
    value = build(name, path)
    def task(data):
        return 1
    if decorated:
        from interactive import vscode
        task = vscode(ide="none")(task)
    task(value)  # the first call prepares the process
    kept = 0
    copy_ms = 0.0
    if name.endswith("_kept"):
        from interactive.inputs import snapshot
        taken = snapshot.take((value,), {}, int(os.environ["PODCODE_MAX_SNAPSHOT_BYTES"]))
        [argument] = taken.arguments
        assert argument.not_kept is None, argument.not_kept
        views = [memoryview(b).cast("B") for b in argument.buffers]
        kept = len(argument.blob) + sum(v.nbytes for v in views if not v.readonly)
        del taken, argument, views
        source = bytearray(kept)
        started = time.perf_counter()
        bytearray(memoryview(source))
        copy_ms = (time.perf_counter() - started) * 1e3
        del source
    times = []
    peak_reset()
    before = status("VmRSS")
    for _ in range(int(sys.argv[4])):
        started = time.perf_counter()
        task(value)
        times.append((time.perf_counter() - started) * 1e3)
    grown = status("VmHWM") - before
    print(json.dumps({"ms": statistics.median(times), "grown": grown, "kept": kept,
                      "copy_ms": copy_ms}))

main(sys.argv[1], sys.argv[2] == "1", sys.argv[3])
'''

NOTHING_COPIED = ["memmap_1gib", "bytearray_200mb", "objects_1m", "dict_2m", "dataframe_100mb",
                  "tensor_100mb", "own_reduce"]
KEPT = ["bytearray_200mb_kept", "dataframe_100mb_kept", "tensor_100mb_kept"]


PER_CALL = ["int", "list_3", "list_5000_ints", "dict_10k_str_float", "dataclasses_1000",
            "config_nested", "array_array_200mb_over_budget",
            "ndarray_subclass_200mb_over_budget"]

PER_CALL_WORKER = r'''
import dataclasses, json, pickle, sys, timeit
import array
import numpy as np
from interactive import vscode
from interactive.base.settings import Settings
from interactive.inputs import snapshot

@dataclasses.dataclass
class Small:
    index: int
    rate: float
    name: str

class Frames(np.ndarray):
    pass

def build(name):
    if name == "int":
        return 7
    if name == "list_3":
        return [1, 2, 3]
    if name == "list_5000_ints":
        return list(range(5000))
    if name == "dict_10k_str_float":
        return {f"key{index}": index * 0.5 for index in range(10_000)}
    if name == "dataclasses_1000":
        return [Small(index, index * 0.5, "x") for index in range(1000)]
    if name == "config_nested":
        return {"model": {"layers": [64, 128, 256], "activation": "relu", "dropout": 0.1},
                "optimizer": {"lr": 1e-3, "betas": (0.9, 0.999), "decay": [0.0] * 4},
                "data": {"paths": [f"shard-{index}" for index in range(16)], "batch": 32}}
    if name == "array_array_200mb_over_budget":
        return array.array("b", bytes(200 << 20))
    if name == "ndarray_subclass_200mb_over_budget":
        return np.zeros(200 << 20, dtype=np.uint8).view(Frames)
    raise KeyError(name)

def task(data):
    return 1

def each(call, seconds=0.02):
    started = timeit.default_timer()
    call()
    once = max(timeit.default_timer() - started, 1e-7)
    number = max(1, int(seconds / once))
    return min(timeit.repeat(call, number=number, repeat=3)) / number * 1e6

decorated = vscode(ide="none")(task)
decorated(0)  # the first call prepares the process
out = {}
for name in sys.argv[1].split(","):
    value = build(name)
    taken = snapshot.take((value,), {}, Settings().max_snapshot_bytes)
    kept = taken is not None and taken.arguments[0].blob is not None
    del taken
    ours, bare, pickled = [], [], []
    for index in range(int(sys.argv[2])):
        steps = [(ours, lambda: decorated(value)), (bare, lambda: task(value)),
                 (pickled, lambda: pickle.dumps(value, protocol=5))]
        for into, call in (steps if index % 2 == 0 else steps[::-1]):
            into.append(each(call))
    out[name] = {"ours": ours, "bare": bare, "pickle": pickled, "kept": kept}
print(json.dumps(out))
'''


def per_call(home: Path) -> list[dict[str, Any]]:
    """``success_path_overhead_us_<kind>`` for every kind of :data:`PER_CALL`, measured in
    one fresh process (``PODCODE_ENABLE=1``, the default ``max_snapshot_bytes``)."""
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home)}
    env.pop("PODCODE_MAX_SNAPSHOT_BYTES", None)
    done = subprocess.run(
        [sys.executable, "-c", PER_CALL_WORKER, ",".join(PER_CALL), str(RUNS)],
        capture_output=True, text=True, env=env, timeout=900, check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    if done.returncode != 0:
        raise RuntimeError(f"per-call figures: {done.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    entries = []
    for name in PER_CALL:
        sample = found[name]
        overhead = [o - b for o, b in zip(sample["ours"], sample["bare"], strict=True)]
        pickle_us = statistics.median(sample["pickle"])
        goal = f"<= {10 + 1.5 * pickle_us:.1f}" if sample["kept"] else "<= 10"
        what = "kept at the call" if sample["kept"] else "left for the failure, named"
        entries.append(figure(
            f"success_path_overhead_us_{name}", overhead, unit="us", goal=goal,
            baseline=sample["pickle"], digits=2, kept=sample["kept"],
            measures=f"time @vscode adds to a call that succeeds, input: {name} ({what})",
            baseline_is="pickle.dumps (protocol 5) of the same input, same process (us)"))
    return entries


def _run(name: str, decorated: bool, path: Path, home: Path) -> dict[str, float]:
    env = {**os.environ, "PODCODE_ENABLE": "1", "PODCODE_HOME": str(home)}
    if name.endswith("_kept"):
        env["PODCODE_MAX_SNAPSHOT_BYTES"] = KEEP_ALL
    done = subprocess.run(
        [sys.executable, "-c", WORKER, name, "1" if decorated else "0", str(path), str(CALLS)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _case(name: str, path: Path, home: Path) -> list[dict[str, Any]]:
    ours: list[dict[str, float]] = []
    bare: list[dict[str, float]] = []
    for index in range(RUNS):
        order = [(ours, True), (bare, False)] if index % 2 == 0 else [(bare, False), (ours, True)]
        for into, decorated in order:
            into.append(_run(name, decorated, path, home))
    overhead = [o["ms"] - b["ms"] for o, b in zip(ours, bare, strict=True)]
    grown = [(o["grown"] - b["grown"]) / MIB for o, b in zip(ours, bare, strict=True)]
    if name.endswith("_kept"):
        copy_ms = statistics.median(o["copy_ms"] for o in ours)
        kept_mib = statistics.median(o["kept"] for o in ours) / MIB
        time_goal, rss_goal = f"<= {1 + 2 * copy_ms:.1f}", f"<= {kept_mib + 1:.1f}"
        extra: dict[str, Any] = {"kept_mib": round(kept_mib, 1), "copy_ms": round(copy_ms, 1)}
    else:
        time_goal, rss_goal, extra = "<= 1", "<= 1", {}
    return [
        figure(f"success_path_overhead_ms_{name}", overhead, unit="ms", goal=time_goal,
               baseline=[b["ms"] for b in bare], digits=3,
               measures=f"time @vscode adds to a call that succeeds, input: {name}",
               baseline_is="the undecorated call (ms)", **extra),
        figure(f"success_path_rss_mib_{name}", grown, unit="MiB", goal=rss_goal,
               baseline=[b["grown"] / MIB for b in bare], digits=2,
               measures=f"peak RSS @vscode adds to a call that succeeds, input: {name}",
               baseline_is="the undecorated call's peak RSS growth (MiB)", **extra),
    ]


def run() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="podcode-bench-") as folder:
        path = Path(folder) / "sparse-1gib.bin"
        with open(path, "wb") as handle:
            handle.truncate(1 << 30)
        home = Path(folder) / "home"
        entries.extend(per_call(home))
        for name in [*NOTHING_COPIED, *KEPT]:
            entries.extend(_case(name, path, home))
    return entries


if __name__ == "__main__":
    for entry in run():
        print(entry)
