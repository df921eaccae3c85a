"""Run every benchmark module and write ``benchmarks/results.json``.

Each ``bench_*.py`` exposes ``run() -> list[dict]`` with entries
``{"name", "value", "unit", "baseline", "goal"}`` and, through
:mod:`benchmarks.harness`, ``min``, ``max`` and ``runs``: the median and the range of
several runs. Baselines are measured in the same run, interleaved with podcode's own
runs, since these machines are shared and noisy; where a figure has no comparable
baseline it says so (``baseline`` is null and the goal is absolute).

The file holds ``{"machine", "started", "finished", "figures"}``;
``benchmarks/report.py`` turns it into docs/performance.md.

Run: ``python benchmarks/run.py [name ...]`` (only the modules whose name contains one).
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


def main(names: list[str]) -> int:
    figures: list[dict[str, Any]] = []
    failed = 0
    started = time.time()
    host = machine()
    modules = [
        p.stem for p in sorted(HERE.glob("bench_*.py"))
        if not names or any(n in p.stem for n in names)
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
        for entry in entries:
            print(_show(entry), flush=True)
        figures.extend(entries)
        print(f"   ({time.perf_counter() - clock:.1f}s)", flush=True)
    host["load_average_after"] = machine()["load_average"]
    results = {
        "machine": host,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "modules_failed": failed,
        "figures": figures,
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS} ({len(figures)} figures, {failed} benchmark modules failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run the benchmarks; write results.json.")
    parser.add_argument("names", nargs="*", help="only the modules whose name contains one")
    raise SystemExit(main(parser.parse_args().names))
