"""Run every benchmark module and write ``benchmarks/results.json``.

Each ``bench_*.py`` exposes ``run() -> list[dict]`` with entries
``{"name", "value", "unit", "baseline", "goal"}``; values are measured against a
baseline taken in the same run, since these machines are shared and noisy.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main(names: list[str]) -> int:
    results: list[dict[str, object]] = []
    failed = 0
    modules = sorted(p.stem for p in HERE.glob("bench_*.py"))
    for name in modules:
        if names and not any(n in name for n in names):
            continue
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            entries = importlib.import_module(f"benchmarks.{name}").run()
        except Exception:
            traceback.print_exc()
            failed += 1
            continue
        for entry in entries:
            print(
                f"   {entry['name']}: {entry['value']} {entry['unit']} "
                f"(baseline {entry['baseline']}, "
                f"goal {entry['goal']})",
                flush=True,
            )
        results.extend(entries)
        print(f"   ({time.perf_counter() - started:.1f}s)")
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"wrote {HERE / 'results.json'} ({len(results)} figures, {failed} benchmark modules failed)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
