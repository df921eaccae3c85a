"""A torchrun job seen through the coding agent's door: DistributedDataParallel under
torchrun (gloo, CPU, 2 ranks) where only rank 1 fails (its shard holds one index past the
data) while rank 0 is in DDP's gradient all-reduce. The MCP SDK's client drives a real
``podcode mcp`` over stdio: it lists both ranks' sessions, finds which rank failed (and
that rank 0 only stopped because of it), reads the failure on that rank, evaluates in its
failing frame, fixes the code with a diff and resumes once; the resume reaches both ranks
and the job ends with the weights the fixed script gives with podcode off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import torchrun_job
from tests.agent_fixture import Agent, mcp_agent, text_of
from tests.torchrun_job import Torchrun, checksums, finish, job_with_bug

pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent / "ddp_examples" / "multigpu_torchrun.py"
SCRIPT = ("multigpu_torchrun.py", "2", "1")
BUG = ("for _ in range(size)]", "for _ in range(size - 1)]")
"""Rank 1's shard ends at index 255, one past the data: IndexError at its last step."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fixed script's result with podcode off."""
    return torchrun_job.reference(tmp_path_factory.mktemp("reference"), EXAMPLE, SCRIPT)


@pytest.fixture
def job(tmp_path: Path, podcode_home: Path) -> Iterator[Torchrun]:
    with job_with_bug(tmp_path / "workspace", podcode_home, EXAMPLE, BUG, SCRIPT) as run:
        yield run


def the_fix(hit: str) -> str:
    """What the agent writes from ``search_code``'s hit (``path:line: text``): that one
    line changed, as a unified diff."""
    path, line, text = hit.split(":", 2)
    before = text[1:]
    assert BUG[1] in before, hit
    return (f"--- a/{path}\n+++ b/{path}\n@@ -{line} +{line} @@\n-{before}\n"
            f"+{before.replace(BUG[1], BUG[0])}\n")


async def call(agent: Agent, tool: str, **arguments: Any) -> Any:
    result = await agent.call(tool, **arguments)
    assert not result.is_error, f"{tool}: {text_of(result)}"
    text = text_of(result)
    return json.loads(text) if text.startswith("{") else text


async def test_the_agent_finds_the_failed_rank_fixes_it_and_one_resume_ends_the_job(
    job: Torchrun, reference: str, tmp_path: Path
) -> None:
    tokens = [job.wait_waiting(rank)["token"] for rank in (1, 0)]
    async with mcp_agent(tmp_path, "--local") as agent:
        listed = (await call(agent, "list_sessions"))["sessions"]
        assert [(s["state"], s["task"]) for s in listed] == [
            ("waiting", "multigpu_torchrun.py:main")] * 2
        by_rank = {s["rank"]["rank"]: s for s in listed}
        assert sorted(by_rank) == [0, 1]
        victim, culprit = by_rank[0]["session"], by_rank[1]["session"]
        # Either rank's entry says rank 1 failed on its own, rank 0 only stopped.
        for entry in listed:
            [failed] = entry["failed_ranks"]
            assert (failed["rank"], failed["error"]) == (1, "IndexError: list index out of range")
            assert [(s["rank"], s["because_rank"]) for s in entry["stopped_ranks"]] == [(0, 1)]
        assert by_rank[0]["failed_ranks"][0]["session"] == culprit
        assert by_rank[1]["failed_ranks"][0]["this_session"] is True

        status = await call(agent, "session_status", session=victim)
        assert status["stopped_ranks"][0]["this_session"] is True
        pointed = await call(agent, "describe_failure", session=victim)
        assert f"only stopped because rank 1 failed (its session is {culprit})" in pointed["next"]

        failure = await call(agent, "describe_failure", session=culprit)
        assert failure["exception"]["type"] == "IndexError"
        assert failure["frames"][failure["failing_frame"]]["function"] == \
            "MyTrainDataset.__getitem__"
        assert await call(agent, "evaluate", session=culprit,
                          code="index, len(self.data)") == "(255, 255)"
        hit = await call(agent, "search_code", session=culprit, pattern=r"range\(size")
        assert hit.startswith(f"{EXAMPLE.name}:34:"), hit
        written = await call(agent, "apply_diff", session=culprit, diff=the_fix(hit))
        assert written["written"] == [EXAMPLE.name]

        resumed = await call(agent, "resume", session=culprit, wait_seconds=150)
        assert resumed["outcome"] == "returned", json.dumps(resumed)
        assert resumed["resume"]["patched"] == ["__main__.MyTrainDataset.__init__"]
        # The session forwarded the resume to rank 0's: both ranks re-ran.
        assert resumed["ranks"] == [{"rank": 0, "session": victim, "outcome": "returned"}]
    output = finish(job)
    assert checksums(output) == [reference], output
    received = agent.received()
    assert received and all(token.encode() not in received for token in tokens)
