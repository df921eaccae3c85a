"""Write docs/performance.md and its chart from ``benchmarks/results.json``.

``make bench`` runs it after the benchmarks; ``python benchmarks/report.py [results]``
runs it alone. The page holds what the results file holds (every figure, its median,
range and number of runs, its baseline and goal, the machine), plus what each figure
measures, against what, and the command that reproduces it. The chart is an SVG
written here by hand (no plotting library): every ratio figure on a log scale, its
median, its range and its goal.
"""

from __future__ import annotations

import html
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
DOCS = HERE.parent / "docs"
PAGE = DOCS / "performance.md"
CHART = DOCS / "performance.svg"

ABOUT: dict[str, tuple[str, str]] = {
    "overhead_us_per_call": (
        "extra cost of a call through `@vscode` that succeeds",
        "the undecorated function's own call"),
    "capture_throughput_ratio": (
        "capture (save, load, then one read of every page) of 512 MiB of NumPy arrays; "
        "higher is better",
        "`np.save` + `np.load` of the same arrays, one file each, in the same folder"),
    "capture_throughput_ratio_torch": (
        "capture of a state_dict-like dict of PyTorch CPU tensors (float32, bfloat16, a tied "
        "weight, a view), 512 MiB; higher is better",
        "`torch.save` + `torch.load` (defaults) of the same dict"),
    "capture_at_call_overhead_ratio_1kib": (
        "the snapshot of a task's arguments taken at each call (`snapshot_inputs=\"call\"`): "
        "a 1 KiB list of ints, pickled in band",
        "`pickle.dumps` of the same argument"),
    "capture_at_call_overhead_ratio_1mib": (
        "the snapshot at each call of a 1 MiB NumPy array (its buffer copied out of band)",
        "`pickle.dumps` of the same argument"),
    "capture_at_call_overhead_ratio_100mib": (
        "the snapshot at each call of a 100 MiB NumPy array: over `max_snapshot_bytes` (64 MiB), "
        "so named, its size read before a byte is copied",
        "`pickle.dumps` of the same argument"),
    "async_loop_stall_ms": (
        "longest extra gap of a 10 ms ticker coroutine while an `async def` task's session "
        "opens (with code-server) and waits",
        "the same program with podcode disabled (the failure caught, no session)"),
    "flyte2_resume_to_result_s": (
        "Flyte 2 local run (`flyte.run`): `POST /api/resume` of a failed async task to the "
        "run's result",
        "none: an absolute goal"),
    "cli_help_s": (
        "`podcode --help`, a new process (Python's start, the imports, the parser)",
        "`python -c pass` with the same interpreter"),
    "sessions_per_bug": (
        "Ray: sessions opened when 100 tasks of one job (`ray.get` over a `@vscode` remote "
        "function, real local cluster) hit one bug",
        "none: an absolute goal (a session per task without the job's bug board)"),
    "ray_resume_to_result_s": (
        "Ray: `POST /api/resume` of that bug's session to the driver's `ray.get` of all 100 "
        "results returning, every task that hit the bug fixed",
        "none: an absolute goal"),
    "resume_latency_s": (
        "`POST /api/resume` to the task running again with an edit patched in",
        "none: an absolute goal"),
    "hash_throughput_ratio": (
        "input hash (`hash_inputs`) over 512 MiB of arrays; higher is better",
        "the `blake3` package alone on the same bytes with the same threads "
        "(`max_threads=AUTO`): podcode's own overhead"),
    "hash_mib_per_s": (
        "input hash throughput",
        "one read of the same bytes from memory on as many threads: the ceiling"),
    "cache_roundtrip_overhead_ratio": (
        "`TaskCache.put` + `get` of a 128 MiB array in a local store",
        "writing and reading the same bytes as a plain file"),
    "orphans_after_sigkill": (
        "processes of a session (code-server, a terminal) still running 5 s after its task "
        "was killed with SIGKILL",
        "how many ran just before the kill: what would be left without the watchdog"),
    "orphans_cleared_seconds": (
        "seconds from the SIGKILL until none of them runs", "none: an absolute goal"),
    "patch_step_s": (
        "planning and applying an edit of a top-level function, on a heap of 3 million "
        "objects", "none: an absolute goal (part of `resume_latency_s`)"),
    "patch_step_nested_live_s": (
        "the same for a nested function alive on its own (one pass over the heap)",
        "none: an absolute goal"),
    "monitor_cpu_fraction": (
        "CPU of the idle monitor (2,000-file workspace, `poll_seconds=10`)",
        "the same polls re-reading the workspace in full"),
    "reap_latency_s": (
        "cleanup deadline to the pod's DELETE (edits saved, final email, real client)",
        "a bare loop that looks at the clock every 0.5 s, then sends the same DELETE"),
    "time_to_ide_ratio": (
        "task exception to code-server answering `/healthz`",
        "the same code-server started bare with podcode's command line and extensions"),
    "time_to_session_ratio": (
        "task exception to the session waiting (IDE, debugger, `.vscode` ready)",
        "the same bare start"),
    "list_1000_pods_s": (
        "`podcode list -A` over 1,000 session pods",
        "one bare `list_pod_for_all_namespaces` call of the kubernetes client"),
    "ddp_failure_to_all_sessions_s": (
        "DDP under torchrun (gloo, CPU, 2 ranks): rank 1's exception at its last step, while "
        "rank 0 is in the gradient all-reduce, until both ranks' sessions wait",
        "none: without podcode rank 0 waits for gloo's timeout (30 minutes)"),
    "ddp_resume_overhead_s": (
        "the same job: one resume after the fix until torchrun exits with the fixed result, "
        "less the baseline (below zero: the resumed ranks, warm, train faster than a cold run)",
        "the fixed job with podcode off, from both ranks in `main` to its exit"),
    "ranks_in_session_ratio": (
        "torchrun, 2 ranks, one failing: start until both ranks' sessions wait",
        "the fixed job run to its end with podcode off"),
    "vs_flytekit_time_to_ide_warm_ratio": (
        "exception to the IDE answering, podcode with its shared cache warm",
        "flytekit's `@vscode` on the same task, same code-server tarball and extension"),
    "vs_flytekit_time_to_ide_cold_ratio": (
        "the same, podcode's cache empty (it downloads and unpacks the same tarball)",
        "flytekit's `@vscode`, which downloads and unpacks in every pod"),
    "vs_flytekit_time_to_workbench_ratio": (
        "exception to VS Code's workbench shown in Chromium (podcode after its login page)",
        "flytekit's `@vscode`"),
    "vs_flytekit_bytes_per_pod_warm_ratio": (
        "bytes a pod downloads, podcode's cache warm", "flytekit's `@vscode`"),
    "vs_flytekit_bytes_per_pod_cold_ratio": (
        "bytes a pod downloads, podcode's cache empty", "flytekit's `@vscode`"),
    "vs_flytekit_idle_rss_ratio": (
        "memory of the processes that wait (code-server excluded), a tab open",
        "flytekit's `@vscode`"),
    "vs_flytekit_idle_cpu_s_per_min": (
        "CPU seconds per minute of the processes that wait (code-server excluded), a tab "
        "open and untouched",
        "the same for flytekit's `@vscode` (its own figure: no ratio, it can read 0)"),
}


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None else str(value)
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 0.01:
        return f"{value:.3g}"
    return f"{value:.2g}"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _spread(entry: dict[str, Any]) -> str:
    if "min" not in entry:
        return "–"
    return f"{_number(entry['min'])} – {_number(entry['max'])}"


def _baseline(entry: dict[str, Any]) -> str:
    base = entry.get("baseline")
    if base is None:
        return "–"
    unit = entry.get("baseline_unit")
    if unit is None and not str(entry.get("unit", "")).startswith("x"):
        unit = entry.get("unit", "")  # a quantity's baseline is in its own unit
    text = f"{_number(base)} {unit or ''}".strip()
    if "baseline_min" in entry:
        text += f" ({_number(entry['baseline_min'])} – {_number(entry['baseline_max'])})"
    return text


def _met(entry: dict[str, Any]) -> str:
    return {True: "yes", False: "**no**", None: "–"}[entry.get("met")]


def figure_rows(figures: list[dict[str, Any]]) -> list[str]:
    rows = ["| figure | median | range | runs | unit | baseline (median, range) | goal | met |",
            "|---|---|---|---|---|---|---|---|"]
    for entry in figures:
        if entry.get("kind") == "behaviour":
            continue
        rows.append("| " + " | ".join(_cell(c) for c in (
            f"`{entry['name']}`", _number(entry.get("value")), _spread(entry),
            entry.get("runs", 1), entry.get("unit", ""), _baseline(entry),
            entry.get("goal", "–"), _met(entry))) + " |")
    return rows


def behaviour_rows(figures: list[dict[str, Any]]) -> list[str]:
    found = [e for e in figures if e.get("kind") == "behaviour"]
    if not found:
        return []
    rows = ["| behaviour | podcode | flytekit's `@vscode` |", "|---|---|---|"]
    for entry in found:
        label = entry["name"].removeprefix("vs_flytekit_").replace("_", " ")
        rows.append(f"| {_cell(label)} | {_cell(entry['value'])} | {_cell(entry['baseline'])} |")
    return rows


def about_rows(figures: list[dict[str, Any]]) -> list[str]:
    rows = ["| figure | what is measured | against what | reproduce |", "|---|---|---|---|"]
    for entry in figures:
        if entry.get("kind") == "behaviour":
            continue
        what, against = ABOUT.get(entry["name"], (
            entry.get("measures", "see the module's docstring"),
            entry.get("baseline_is", "see the module's docstring")))
        module = entry.get("module", "")
        command = f"`python benchmarks/run.py {module}`" if module else "–"
        rows.append(f"| `{entry['name']}` | {_cell(what)} | {_cell(against)} | {command} |")
    return rows


def machine_lines(results: dict[str, Any]) -> list[str]:
    host = results.get("machine", {})
    load = host.get("load_average")
    after = host.get("load_average_after")
    reruns = [
        f"- Run again {rerun['started']} in {rerun['seconds']} s ({rerun['modules_failed']} "
        f"failed), their figures replacing the earlier ones: {', '.join(rerun['modules'])}."
        for rerun in results.get("reruns", [])
    ]
    return [
        f"- Measured {results.get('started', '?')} in {results.get('seconds', '?')} s "
        f"({results.get('modules_failed', 0)} benchmark modules failed).",
        *reruns,
        f"- Machine: {host.get('cores', '?')} cores ({host.get('cpu_model', '?')}), "
        f"{host.get('memory_gib', '?')} GiB, {host.get('platform', '?')}, "
        f"{host.get('python', '?')}.",
        f"- Load average (1, 5, 15 min) at the start: {load}; at the end: {after}.",
    ]


def chart(figures: list[dict[str, Any]]) -> str:
    """Every ratio figure (unit starting with ``x``) on one log axis: the range as a line,
    the median as a dot, the goal as a tick."""
    ratios = [e for e in figures if str(e.get("unit", "")).startswith("x")
              and isinstance(e.get("value"), (int, float)) and e["value"] > 0]
    low, high = 0.1, 10.0
    for entry in ratios:
        for key in ("min", "max", "value"):
            if isinstance(entry.get(key), (int, float)) and entry[key] > 0:
                low, high = min(low, entry[key]), max(high, entry[key])
    low = 10 ** math.floor(math.log10(low))
    high = 10 ** math.ceil(math.log10(high))
    left, width, row, top = 300, 460, 26, 40
    height = top + row * len(ratios) + 40

    def x(value: float) -> float:
        return left + width * (math.log10(value) - math.log10(low)) / (
            math.log10(high) - math.log10(low))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 40}" '
        f'height="{height}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        '<text x="10" y="20" font-size="14">Ratio figures (log scale): median (dot), '
        'range of runs (line), goal (red tick)</text>',
    ]
    decade = low
    while decade <= high * 1.0001:
        px = x(decade)
        parts.append(f'<line x1="{px:.1f}" y1="{top - 8}" x2="{px:.1f}" '
                     f'y2="{height - 30}" stroke="#ddd"/>')
        parts.append(f'<text x="{px:.1f}" y="{height - 14}" text-anchor="middle">'
                     f'{_number(decade)}</text>')
        decade *= 10
    one = x(1.0)
    parts.append(f'<line x1="{one:.1f}" y1="{top - 8}" x2="{one:.1f}" y2="{height - 30}" '
                 'stroke="#888" stroke-dasharray="4 3"/>')
    for index, entry in enumerate(ratios):
        y = top + row * index + row / 2
        parts.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{html.escape(entry["name"])}</text>')
        lo, hi = entry.get("min", entry["value"]), entry.get("max", entry["value"])
        parts.append(f'<line x1="{x(lo):.1f}" y1="{y:.1f}" x2="{x(hi):.1f}" y2="{y:.1f}" '
                     'stroke="#4a7ab5" stroke-width="3"/>')
        color = {True: "#2e7d32", False: "#c62828"}.get(entry.get("met"), "#4a7ab5")
        parts.append(f'<circle cx="{x(entry["value"]):.1f}" cy="{y:.1f}" r="5" '
                     f'fill="{color}"/>')
        goal = re.match(r"^\s*[<>]=?\s*([0-9.]+)", str(entry.get("goal", "")))
        if goal and float(goal.group(1)) > 0:
            gx = x(float(goal.group(1)))
            parts.append(f'<line x1="{gx:.1f}" y1="{y - 9:.1f}" x2="{gx:.1f}" '
                         f'y2="{y + 9:.1f}" stroke="#c62828" stroke-width="2"/>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _tarball_note(figures: list[dict[str, Any]]) -> str:
    size = next((e["tarball_bytes"] for e in figures if "tarball_bytes" in e), None)
    return f" The packed tarball: {size / 2**20:.0f} MiB." if size else ""


def page(results: dict[str, Any]) -> str:
    figures = results.get("figures", [])
    lines = [
        "# Performance",
        "",
        "<!-- Generated by benchmarks/report.py from benchmarks/results.json: do not edit. -->",
        "",
        "`make bench` measures every figure below and regenerates this page "
        "(`python benchmarks/run.py [module ...]`, then `python benchmarks/report.py`). "
        "Each figure is the median of several runs (the range is the fastest and slowest "
        "run); each baseline is measured in the same run, interleaved with podcode's own "
        "runs, so both see the same machine. Ratios: podcode over its baseline unless the "
        "figure says \"higher is better\". `PODCODE_BENCH_RUNS` sets the number of runs.",
        "",
        *machine_lines(results),
        "",
        "## Figures",
        "",
        *figure_rows(figures),
        "",
        "![ratio figures](performance.svg)",
        "",
        "The chart: every ratio figure on a log scale, the median as a dot (green: goal met, "
        "red: not met, blue: no goal), the range of the runs as a line, the goal as a red "
        "tick; a ratio of 0 (nothing downloaded) has no place on it.",
        "",
    ]
    behaviour = behaviour_rows(figures)
    if behaviour:
        lines += [
            "## podcode and flytekit's `@vscode`, side by side",
            "",
            "`benchmarks/bench_vs_flytekit.py` runs the same failing task under flytekit's "
            "`@task`, once with podcode's `@vscode` and once with flytekit's "
            "(`run_task_first=True`), each in a fresh process started by `pyflyte-execute` "
            "(a task-execution context, as in a Flyte pod) with a fresh `HOME`. Both get "
            "the same code-server and the same `.vsix` from a local HTTP server. No release "
            "tarball is reachable where these figures were taken: the tarball is packed "
            "from podcode's npm install of code-server, which is larger than the release "
            "tarball, and that penalises flytekit's per-pod download and unpacking (and "
            f"podcode's cold start).{_tarball_note(figures)} Observed in the same run:",
            "",
            *behaviour,
            "",
        ]
    lines += [
        "## What each figure measures",
        "",
        *about_rows(figures),
        "",
        "Benchmarks that need what a machine lacks (code-server, chromium, flytekit, "
        "torch) fail or leave their figures out; `results.json` says how many modules "
        "failed.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    source = Path(argv[0]) if argv else RESULTS
    results = json.loads(source.read_text())
    if isinstance(results, list):  # an older results file: figures only
        results = {"figures": results}
    DOCS.mkdir(exist_ok=True)
    PAGE.write_text(page(results))
    CHART.write_text(chart(results.get("figures", [])))
    print(f"wrote {PAGE} and {CHART}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
