"""The tools' own decisions (interactive/agent/tools.py): what of a status an agent sees,
a cell's answer as text and images, read-only refusals."""

from __future__ import annotations

from interactive.agent.reach import Reach
from interactive.agent.scrub import Secrets
from interactive.agent.tools import CHANGES, MAX_IMAGES, Tools, cell_reply, failing_frame


def tools(read_only: bool = False) -> Tools:
    return Tools(Reach({}, Secrets(), cluster=False), read_only=read_only, clock=lambda: 1000.0)


def test_a_distributed_jobs_status_names_its_ranks_and_the_one_that_failed() -> None:
    status = {"state": "waiting", "error": "RuntimeError: nan at rank 1", "attempt": 1,
              "cleanup_at": 1600.0, "rank": {"rank": 0, "local_rank": 0, "world_size": 2},
              "ranks": [{"local_rank": 1, "rank": 1, "state": "waiting",
                         "error": "RuntimeError: nan"}], "gpu_utilization": None}
    summary = tools().summary(status)
    assert summary["cleanup_in_seconds"] == 600
    assert summary["failed_ranks"] == [
        {"rank": 0, "local_rank": 0, "this_session": True, "error": "RuntimeError: nan at rank 1"},
        {"rank": 1, "local_rank": 1, "error": "RuntimeError: nan"}]
    assert "stopped_ranks" not in summary
    assert summary["rank"]["world_size"] == 2 and "gpu_utilization" not in summary


def test_a_cells_text_figures_and_errors() -> None:
    answer = {"ok": True, "outputs": [
        {"type": "stream", "name": "stdout", "text": "printed\n"},
        {"type": "display", "data": {"text/plain": "42"}},
        *[{"type": "display", "data": {"image/png": "aGk=", "text/plain": "<Figure>"}}] * 5]}
    reply = cell_reply(answer)
    assert reply.text.startswith("printed\n42") and "1 figures not shown" in reply.text
    assert reply.images == [("image/png", "aGk=")] * MAX_IMAGES and not reply.error
    failed = cell_reply({"ok": False, "outputs": [
        {"type": "error", "ename": "NameError", "evalue": "x", "traceback": "NameError: x"}]})
    assert failed.error and failed.text == "NameError: x"


def test_read_only_refuses_exactly_what_changes_the_session() -> None:
    strict, free = tools(read_only=True), tools()
    for name in ("evaluate", "write_file", "apply_diff", "resume", "abort"):
        refusal = strict.allowed(name)
        assert refusal is not None and refusal.error and "--read-only" in refusal.text
        assert free.allowed(name) is None
    assert set(CHANGES) == {"evaluate", "write_file", "apply_diff", "resume", "abort"}
    for name in ("describe_failure", "read_file", "keepalive", "list_sessions"):
        assert strict.allowed(name) is None


def test_the_failing_frame_is_the_sessions_choice_else_the_innermost() -> None:
    assert failing_frame({"failed_frame": 2}) == 2
    assert failing_frame({"failed_frame": None}) == 0
