"""End to end: a coding agent's routes against a real session (a real decorated task that
failed in a child process), through the one control-API client, as ``podcode mcp`` calls
them: the failure and its frames, bounded locals, evaluation in a chosen frame with its
timeout, reading and searching the workspace, the edits; the agent's calls recorded, or
refused where agents are not let in; the token in no answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from interactive.base.control_client import (
    ControlBadRequest,
    ControlClient,
    ControlError,
    ControlRefused,
)
from interactive.base.routes import ACTOR_HEADER
from tests.session_fixture import Job

JOB = """
import numpy as np
from interactive import vscode

def check(batch, rows):
    width = len(rows)
    raise ValueError(f"bad batch: {batch.shape} for {width} rows")

@vscode(ide="none", port=0, control_port=0, debug_port=0, ssh=False)
def train(factor):
    big = np.zeros(1_000_000)
    rows = list(range(1_000_000))
    table = {"name": "x" * 10_000, "factor": factor}
    check(big, rows)

if __name__ == "__main__":
    train(4)
"""


def _client(record: dict[str, Any]) -> ControlClient:
    return ControlClient(record["control_url"], record["token"], timeout=30,
                         headers={ACTOR_HEADER: "agent via MCP"})


def _answers(record: dict[str, Any]) -> tuple[list[str], Callable[..., Any]]:
    """Every answer (and error) the calls get, as text, and what makes a call."""
    seen: list[str] = []

    def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            answer = method(*args, **kwargs)
        except ControlError as error:
            seen.append(f"{error} {error.reason}")
            raise
        seen.append(json.dumps(answer))
        return answer

    return seen, call


def test_an_agent_reads_evaluates_edits_and_is_recorded(job: Job) -> None:
    job.write("job.py", JOB)
    outside = job.workspace.parent / "outside.py"
    outside.write_text("raise OutsideError\n")
    (job.workspace / "log-link").symlink_to(outside)  # a link out of the workspace
    record = job.start().wait_state("waiting")
    client, token = _client(record), record["token"]
    seen, call = _answers(record)
    mcp = json.loads((job.workspace / ".vscode" / "mcp.json").read_text())
    assert mcp["servers"]["podcode"]["args"][-1] == "mcp"  # the IDE's agent finds podcode

    failure = call(client.frames)
    assert failure["exception"]["type"] == "ValueError"
    assert "bad batch: (1000000,)" in failure["exception"]["message"]
    assert 'raise ValueError(f"bad batch' in failure["exception"]["traceback"]
    inner, outer = failure["frames"][:2]
    assert (inner["index"], inner["function"], inner["file"]) == (0, "check", "job.py")
    assert outer["function"] == "train" and "check(big, rows)" in outer["source"]
    assert inner["in_workspace"] and failure["failed_frame"] == 0

    local = {v["name"]: v for v in call(client.frame_locals, 0)["locals"]}
    assert "shape=(1000000,)" in local["batch"]["summary"]
    assert local["rows"]["summary"].startswith("length=1000000 [0, 1, 2, 3, 4, ...")
    outer_locals = call(client.frame_locals, 1)
    names = {v["name"]: v for v in outer_locals["locals"]}
    assert names["factor"]["summary"] == "4" and "length=10000" in names["table"]["summary"]
    assert len(json.dumps(outer_locals)) < 32 * 1024 and outer_locals["left_out"] == 0

    here = call(client.evaluate, "width * 2", frame=0)
    assert here["ok"] and here["outputs"][-1]["data"]["text/plain"] == "2000000"
    there = call(client.evaluate, "factor + len(table)", frame=1)
    assert there["outputs"][-1]["data"]["text/plain"] == "6"
    stuck = call(client.evaluate, "while True:\n    pass", frame=1, timeout=1.0)
    assert stuck["timed_out"] and not stuck["ok"] and stuck["interrupt"] == "interrupted"
    assert any(o.get("ename") == "KeyboardInterrupt" for o in stuck["outputs"]), stuck
    leak = call(client.evaluate,
                "import os; print(open(os.path.join(os.environ['PODCODE_HOME'], "
                "'session.json')).read())")
    assert "[secret removed]" in json.dumps(leak)
    with pytest.raises(ControlBadRequest, match="no frame 9"):
        call(client.evaluate, "1", frame=9)

    lines = call(client.read_file, "job.py", 5, 6)
    assert lines["text"].splitlines()[0].endswith("def check(batch, rows):")
    assert lines["total_lines"] == JOB.count("\n") and lines["end"] == 6
    with pytest.raises(ControlBadRequest, match="without '..'"):
        call(client.read_file, "../workspace.log")
    with pytest.raises(ControlBadRequest, match="leads outside the workspace"):
        call(client.read_file, "log-link")
    found = call(client.search, r"raise \w+Error", "*.py")
    assert [(m["path"], m["line"]) for m in found["matches"]] == [("job.py", 7)]
    with pytest.raises(ControlBadRequest, match="not a valid regular expression"):
        call(client.search, "(unclosed")

    call(client.push_files, {"job.py": JOB.replace("bad batch", "wrong batch").encode()})
    edits = call(client.edits)
    assert edits["files"] == ["job.py"] and '+    raise ValueError(f"wrong batch' in edits["diff"]

    actions = call(client.status)["actions"]
    assert [a["action"].split(":")[0] for a in actions] == [
        "evaluate in frame 0", "evaluate in frame 1", "evaluate in frame 1",
        "evaluate in frame 0", "evaluate in frame 9", "push files"]
    assert actions[-1]["action"] == "push files: job.py" and actions[-1]["status"] == 200
    assert {a["actor"] for a in actions} == {"agent via MCP"} and actions[4]["status"] == 400
    assert not any(token in text for text in seen), "the token reached an answer"


def test_a_session_that_refuses_agents_answers_them_403(job: Job) -> None:
    job.write("job.py", JOB)
    record = job.start(env={"PODCODE_AGENTS": "0"}).wait_state("waiting")
    client = _client(record)
    for ask in (client.frames, client.status, client.resume):
        with pytest.raises(ControlRefused) as refused:
            ask()
        assert refused.value.status == 403 and "PODCODE_AGENTS=0" in str(refused.value.reason)
    engineer = ControlClient(record["control_url"], record["token"], timeout=30)
    assert engineer.status()["state"] == "waiting"  # the engineer's own tools still work
    assert engineer.frames()["exception"]["type"] == "ValueError"
    assert not (job.workspace / ".vscode" / "mcp.json").exists()
