"""The benchmarks' shared harness and report: medians and ranges, goals, old entries, the
generated page and chart (no benchmark is run here)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

from benchmarks import report
from benchmarks.harness import figure, goal_met, interleaved, machine, normalize, ratio


def test_interleaved_runs_alternate_which_goes_first() -> None:
    order: list[str] = []
    ours, theirs = interleaved(lambda: order.append("a") or 1.0,
                               lambda: order.append("b") or 2.0, runs=4)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert ours == [1.0] * 4 and theirs == [2.0] * 4


def test_a_figure_keeps_median_range_runs_and_its_baseline_s() -> None:
    entry = figure("x_s", [3.0, 1.0, 2.0], unit="s", baseline=[5.0, 4.0, 6.0], goal="<= 2.5")
    assert (entry["value"], entry["min"], entry["max"], entry["runs"]) == (2.0, 1.0, 3.0, 3)
    assert (entry["baseline"], entry["baseline_min"], entry["baseline_max"]) == (5.0, 4.0, 6.0)
    assert goal_met(entry) is True


def test_ratios_are_taken_pair_by_pair() -> None:
    slower = ratio("r", [2.0, 3.0, 9.0], [1.0, 2.0, 3.0], speedup=False, unit="x", goal="<= 2")
    assert (slower["value"], slower["min"], slower["max"]) == (2.0, 1.5, 3.0)
    faster = ratio("r", [1.0], [4.0], speedup=True, unit="x", goal=">= 0.8")
    assert faster["value"] == 4.0 and faster["baseline"] == 4.0 and goal_met(faster)


def test_goals_against_numbers_and_against_the_baseline() -> None:
    assert goal_met({"value": 0.4, "goal": "<= 0.5"}) is True
    assert goal_met({"value": 0.6, "goal": "<= 0.5 (absolute)"}) is False
    assert goal_met({"value": 1.0, "baseline": 1.2, "goal": "<= baseline (a bare call)"})
    assert goal_met({"value": 1.3, "baseline": 1.2, "goal": "<= baseline"}) is False
    assert goal_met({"value": 3.0, "goal": 3.0}) is None  # a bare number: no direction
    assert goal_met({"value": "text", "goal": "-"}) is None


def test_old_entries_are_kept_as_single_runs() -> None:
    old = {"name": "x", "value": 1.5, "unit": "s", "baseline": 2.0, "goal": "<= 2"}
    entry = normalize(old)
    assert entry["runs"] == 1 and entry["met"] is True and "min" not in entry


def test_the_machine_is_described() -> None:
    host = machine()
    assert host["cores"] and host["python"].startswith(("CPython", "PyPy"))
    assert host["platform"] and host["cpu_model"]


def test_the_report_has_every_figure_behaviour_and_a_valid_chart() -> None:
    figures = [
        normalize(figure("time_to_ide_ratio", [1.1, 1.2, 1.3], unit="x", baseline=[0.4],
                         goal="<= 1.25")) | {"module": "bench_ide"},
        normalize({"name": "old_style", "value": 3, "unit": "s", "baseline": None, "goal": 5}),
        normalize({"name": "vs_flytekit_ide_bind_address", "value": "127.0.0.1",
                   "baseline": "0.0.0.0", "unit": "observed", "goal": "-",
                   "kind": "behaviour"}),
    ]
    results = {"machine": machine(), "started": "now", "seconds": 1, "figures": figures}
    text = report.page(results)
    assert "| `time_to_ide_ratio` | 1.2 | 1.1 – 1.3 | 3 | x |" in text
    assert "| `old_style` | 3 | – | 1 | s | – | 5 | – |" in text
    assert "| ide bind address | 127.0.0.1 | 0.0.0.0 |" in text
    assert "`python benchmarks/run.py bench_ide`" in text
    svg = ElementTree.fromstring(report.chart(figures))
    labels = [node.text for node in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "time_to_ide_ratio" in labels and "old_style" not in labels
