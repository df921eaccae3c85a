"""End to end: a real task fails on a typo'd DataFrame column in a child process
(``PODCODE_ENABLE=1``, no IDE, a fresh ``PODCODE_HOME``); the MCP SDK's client drives a
real ``podcode mcp`` over stdio, as a coding agent would: it lists the session, reads the
failure (a 1 GB array and a million-element list in scope, summarised within the bound),
evaluates ``df.columns``, fixes the code with a diff and resumes; the task then returns
what the fixed program returns on its own. No byte the server wrote holds the token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interactive.agent.bounds import MAX_BYTES
from interactive.base import routes
from tests.agent_fixture import mcp_agent, text_of
from tests.cli_fixture import labels
from tests.fake_kube import FakeKube
from tests.session_fixture import Job
from tests.waiting import wait_until

JOB = """\
import numpy as np
import pandas as pd

from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0)
def total(df):
    big = np.broadcast_to(np.float64(1.5), (125_000_000,))  # 1 GB as seen, 8 bytes held
    many = list(range(1_000_000))
    return df["prise"].sum() * df["qty"].sum() + big[0] * 0 + many[0]


if __name__ == "__main__":
    print("RESULT", total(pd.DataFrame({"price": [1.5, 2.0, 4.0], "qty": [1, 2, 3]})))
"""
FIX = """\
--- a/job.py
+++ b/job.py
@@ -10,2 +10,2 @@
     many = list(range(1_000_000))
-    return df["prise"].sum() * df["qty"].sum() + big[0] * 0 + many[0]
+    return df["price"].sum() * df["qty"].sum() + big[0] * 0 + many[0]
"""


def served_or_skip(job: Job) -> None:
    status, _ = job.api("GET", routes.FRAMES)
    if status == 404:
        pytest.skip(f"the session does not serve {routes.FRAMES} (the agent's routes) yet")


async def test_an_agent_fixes_a_real_failed_task_and_it_returns_the_fixed_result(
    job: Job, tmp_path: Path
) -> None:
    job.write("job.py", JOB)
    job.start()
    token = job.wait_state("waiting")["token"]
    served_or_skip(job)
    async with mcp_agent(tmp_path, "--local") as agent:
        [listed] = json.loads(text_of(await agent.call("list_sessions")))["sessions"]
        assert (listed["task"], listed["state"]) == ("job.py:total", "waiting")
        assert "prise" in listed["error"]

        described = text_of(await agent.call("describe_failure", session=listed["session"]))
        assert len(described.encode()) <= MAX_BYTES
        failure = json.loads(described)
        assert failure["exception"]["type"] == "KeyError"
        shown = {v["name"]: json.dumps(v) for v in failure["failing_frame_locals"]}
        assert "125000000" in shown["big"] and "1000000" in shown["many"]
        assert "price" in shown["df"]

        columns = await agent.call("evaluate", code="list(df.columns)")
        assert text_of(columns) == "['price', 'qty']", text_of(columns)
        fixed = await agent.call("apply_diff", diff=FIX)
        assert not fixed.is_error, text_of(fixed)
        edits = json.loads(text_of(await agent.call("show_edits")))
        assert edits["files"] == ["job.py"]
        resumed = json.loads(text_of(await agent.call("resume", wait_seconds=60)))
        assert resumed["outcome"] == "returned", f"{json.dumps(resumed)}\n{job.output()}"
    assert job.wait_exit() == 0, job.output()
    alone = subprocess.run([sys.executable, "job.py"], cwd=job.workspace, capture_output=True,
                           text=True, env={**os.environ, "PODCODE_ENABLE": "0"}, timeout=120)
    expected = [line for line in alone.stdout.splitlines() if line.startswith("RESULT")]
    assert expected == ["RESULT 45.0"], alone.stderr
    assert expected[0] in job.output().splitlines()
    assert (job.session() or {}).get("state") == "done"
    assert token.encode() not in agent.received()


POD_JOB = """\
import pandas as pd

from interactive import vscode


@vscode(ide="none", port=0, control_port=0, debug_port=0)
def total(df):
    return df["prise"].sum() * df["qty"].sum()


if __name__ == "__main__":
    print("RESULT", total(pd.DataFrame({"price": [1.5, 2.0, 4.0], "qty": [1, 2, 3]})))
"""


@pytest.mark.slow
async def test_an_agent_reaches_a_session_in_a_pod_through_the_port_forward(
    job: Job, tmp_path: Path, fake_kube: FakeKube
) -> None:
    fake_kube.add_pod("train-job-0", "ml")
    job.write("job.py", POD_JOB)
    job.start(env={"POD_NAME": "train-job-0", "POD_NAMESPACE": "ml"})
    token = job.wait_state("waiting")["token"]
    served_or_skip(job)
    wait_until(lambda: labels(fake_kube).get("podcode.io/session") == "true", "the pod's labels")
    elsewhere = {"PODCODE_HOME": str(tmp_path / "laptop-home"),
                 "KUBECONFIG": str(fake_kube.kubeconfig)}
    async with mcp_agent(tmp_path, "-n", "ml", env=elsewhere) as agent:
        [listed] = json.loads(text_of(await agent.call("list_sessions")))["sessions"]
        assert (listed["session"], listed["where"]) == ("pod/ml/train-job-0", "pod ml/train-job-0")
        failure = json.loads(text_of(await agent.call("describe_failure")))
        assert failure["exception"]["message"] == "'prise'"
        columns = await agent.call("evaluate", code="list(df.columns)")
        assert text_of(columns) == "['price', 'qty']", text_of(columns)
        fix = await agent.call("apply_diff", diff=FIX_POD)
        assert not fix.is_error, text_of(fix)
        resumed = json.loads(text_of(await agent.call("resume", wait_seconds=60)))
        assert resumed["outcome"] == "returned", resumed
    assert job.wait_exit() == 0, job.output()
    assert "RESULT 45.0" in job.output().splitlines()
    assert token.encode() not in agent.received()


FIX_POD = """\
--- a/job.py
+++ b/job.py
@@ -8 +8 @@
-    return df["prise"].sum() * df["qty"].sum()
+    return df["price"].sum() * df["qty"].sum()
"""
