"""Run every benchmark module and write ``benchmarks/results.json``.

Each ``bench_*.py`` exposes ``run() -> list[dict]`` with entries
``{"name", "value", "unit", "baseline", "goal"}`` and, through
:mod:`benchmarks.harness`, ``min``, ``max`` and ``runs``: the median and the range of
several runs. Baselines are measured in the same run, interleaved with podcode's own
runs, since these machines are shared and noisy; where a figure has no comparable
baseline it says so (``baseline`` is null and the goal is absolute).

The file holds ``{"machine", "started", "finished", "figures"}``;
``benchmarks/report.py`` turns it into docs/performance.md.

Run: ``python benchmarks/run.py [name ...]`` (only the modules whose name contains one);
``--merge`` keeps the figures of the other modules from the results file (to run one
module again after it failed, say): each figure says when its module ran (``ran``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.harness import machine, normalize  # noqa: E402

RESULTS = HERE / "results.json"


def _run_module(name: str) -> list[dict[str, Any]]:
    entries = importlib.import_module(f"benchmarks.{name}").run()
    return [normalize(entry) | {"module": name} for entry in entries]


def _show(entry: dict[str, Any]) -> str:
    spread = f" [{entry['min']}..{entry['max']}]" if "min" in entry else ""
    met = {True: "met", False: "NOT MET", None: "-"}[entry["met"]]
    return (
        f"   {entry['name']}: {entry['value']}{spread} {entry['unit']} over {entry['runs']} "
        f"run(s) (baseline {entry['baseline']}, goal {entry['goal']}: {met})"
    )


def main(names: list[str], merge: bool = False) -> int:
    figures: list[dict[str, Any]] = []
    failed = 0
    started = time.time()
    host = machine()
    stems = [p.stem for p in sorted(HERE.glob("bench_*.py"))]
    modules = [  # a module's whole name picks it alone; a part picks every module with it
        stem for stem in stems
        if not names or any(n == stem or (n not in stems and n in stem) for n in names)
    ]
    if not modules:
        print(f"no benchmark module matches {' '.join(names)}", file=sys.stderr)
        return 2
    for name in modules:
        clock = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            entries = _run_module(name)
        except Exception:
            traceback.print_exc()
            failed += 1
            continue
        ran = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        entries = [entry | {"ran": ran} for entry in entries]
        for entry in entries:
            print(_show(entry), flush=True)
        figures.extend(entries)
        print(f"   ({time.perf_counter() - clock:.1f}s)", flush=True)
    host["load_average_after"] = machine()["load_average"]
    results: dict[str, Any] = {
        "machine": host,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "modules_failed": failed,
        "figures": figures,
    }
    if merge and RESULTS.exists():
        earlier = json.loads(RESULTS.read_text())
        run_now = {entry["module"] for entry in figures}
        kept = [entry for entry in earlier["figures"] if entry.get("module") not in run_now]
        rerun = {"modules": sorted(run_now), "started": results["started"],
                 "seconds": results["seconds"], "modules_failed": failed}
        results = {**earlier, "figures": sorted(kept + figures, key=lambda e: e["module"]),
                   "reruns": [*earlier.get("reruns", []), rerun]}
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS} ({len(figures)} figures, {failed} benchmark modules failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run the benchmarks; write results.json.")
    parser.add_argument("names", nargs="*", help="only the modules whose name contains one")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other modules' figures from the results file")
    arguments = parser.parse_args()
    raise SystemExit(main(arguments.names, arguments.merge))
