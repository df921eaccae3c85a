"""End to end under torchrun (gloo, CPU): a per-rank post-mortem, one resume for all ranks."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests import torchrun_job
from tests.dap import DapClient
from tests.torchrun_job import Torchrun, get, post

pytest.importorskip("torch.distributed")


@pytest.fixture
def torchrun(tmp_path: Path, podcode_home: Path) -> Iterator[Torchrun]:
    workspace = tmp_path / "workspace"
    torchrun_job.copy_example(workspace)
    run = Torchrun(workspace, podcode_home)
    yield run
    run.stop()


def post_mortem(record: dict[str, Any]) -> tuple[str, list[str]]:
    """Attach a DAP client: the exception's type and the functions of the stopped stack."""
    client = DapClient(record["debug"]["host"], record["debug"]["port"])
    try:
        stopped = client.attach_and_stop()
        assert stopped["reason"] == "exception"
        info = client.request("exceptionInfo", threadId=stopped["threadId"])
        frames = client.request("stackTrace", threadId=stopped["threadId"])["stackFrames"]
        client.request("continue", threadId=stopped["threadId"])
        return info["exceptionId"].split()[0], [frame["name"] for frame in frames]
    finally:
        client.close()


def test_rank_fails_both_ranks_open_sessions_one_resume_finishes_both(torchrun: Torchrun) -> None:
    ranks = [torchrun.wait_waiting(0), torchrun.wait_waiting(1)]
    # One debugger per rank, on debug_port + local_rank, each stopped at its own failure.
    assert [r["debug"]["port"] for r in ranks] == [torchrun.debug_port, torchrun.debug_port + 1]
    failed, failed_frames = post_mortem(ranks[1])
    assert failed.endswith("ValueError") and failed_frames[0] == "step"
    peer, peer_frames = post_mortem(ranks[0])
    assert peer.endswith("RuntimeError") and "step" in peer_frames  # in the all-reduce
    assert ranks[1]["error"] == "ValueError: bad batch on rank 1"
    # Status shows the pod's ranks; launch.json attaches to each and to all.
    status = get(ranks[1], "/api/status")
    assert status["rank"]["world_size"] == 2
    assert [r["state"] for r in status["ranks"]] == ["waiting"]
    launch = json.loads((torchrun.workspace / ".vscode" / "launch.json").read_text())
    compound = launch["compounds"][0]
    assert compound["name"].startswith("podcode: attach all ranks")
    assert len(compound["configurations"]) == 2
    # One code-server per pod at most, and only one rank leads.
    assert sorted(bool(r.get("leader")) for r in ranks) == [False, True]
    # The fix, then one resume on one rank: both re-form the group and finish.
    source = torchrun.workspace / "allreduce.py"
    source.write_text(source.read_text().replace(torchrun_job.BUG, "pass"))
    stamp = time.time_ns() + 10_000_000
    os.utime(source, ns=(stamp, stamp))
    assert post(ranks[1], "/api/resume")[0] == 202
    assert torchrun.proc.wait(120) == 0, torchrun.output()
    out = torchrun.output()
    # (1+2)*1 + (1+2)*2, summed over the reduced tensor [1*1+1*2, 2*1+2*2] = 3 + 6
    assert "rank 0 total 9.0" in out and "rank 1 total 9.0" in out
    assert [torchrun.record(r)["state"] for r in (0, 1)] == ["done", "done"]


def test_abort_on_one_rank_ends_every_rank_with_its_own_error(torchrun: Torchrun) -> None:
    ranks = [torchrun.wait_waiting(0), torchrun.wait_waiting(1)]
    assert post(ranks[0], "/api/abort")[0] == 202
    assert torchrun.proc.wait(60) != 0
    out = torchrun.output()
    assert "ValueError: bad batch on rank 1" in out and "Connection closed by peer" in out
    assert not [p for p in psutil.Process().children(True) if "allreduce" in " ".join(p.cmdline())]
