"""``podcode mcp`` driven by the MCP SDK's own client over stdio, against a stand-in
session that speaks the control API's agent routes (tests/agent_fixture.py): a scripted
agent diagnoses a typo'd DataFrame column, fixes it with a diff and resumes; read-only
mode refuses what changes the session; no byte the server writes holds the token."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from interactive.agent.scrub import HIDDEN
from interactive.base import routes
from tests.agent_fixture import JOB, FakeSession, Png, mcp_agent, run_job, stand_in, text_of

FIX = """\
--- a/job.py
+++ b/job.py
@@ -4,2 +4,2 @@
 def total(df):
-    return df["prise"].sum() * df["qty"].sum()
+    return df["price"].sum() * df["qty"].sum()
"""


@pytest.fixture
def fake_session(tmp_path: Path, podcode_home: Path) -> Iterator[FakeSession]:
    with stand_in(tmp_path, podcode_home) as fake:
        yield fake


async def test_a_scripted_agent_diagnoses_fixes_and_resumes(
    fake_session: FakeSession, tmp_path: Path
) -> None:
    async with mcp_agent(tmp_path, "--local") as agent:
        names = {tool.name for tool in (await agent.session.list_tools()).tools}
        assert {"list_sessions", "describe_failure", "evaluate", "apply_diff", "resume",
                "read_file", "search_code", "write_file", "show_edits", "abort",
                "keepalive", "list_frames", "frame_locals"} <= names

        listed = json.loads(text_of(await agent.call("list_sessions")))
        [session] = listed["sessions"]
        assert (session["session"], session["task"], session["state"]) == (
            "local/4242-1", "job.py:total", "waiting")
        assert session["error"] == "KeyError: 'prise'"

        failure = json.loads(text_of(await agent.call("describe_failure")))
        assert failure["exception"]["type"] == "KeyError"
        assert failure["failing_frame"] == 1
        assert failure["failing_frame_locals"][0]["name"] == "df"

        columns = await agent.call("evaluate", code="list(df.columns)")
        assert not columns.is_error
        assert text_of(columns) == repr(["price", "qty"])

        wrong = await agent.call("apply_diff", diff=FIX.replace('df["qty"]', 'df["qtty"]'))
        assert wrong.is_error
        assert "hunk 1" in text_of(wrong) and "does not apply" in text_of(wrong)
        assert (fake_session.workspace / "job.py").read_text() == JOB

        fixed = await agent.call("apply_diff", diff=FIX)
        assert not fixed.is_error, text_of(fixed)
        edits = json.loads(text_of(await agent.call("show_edits")))
        assert edits["files"] == ["job.py"] and '+    return df["price"]' in edits["diff"]

        resumed = json.loads(text_of(await agent.call("resume", wait_seconds=30)))
        assert resumed["outcome"] == "returned"

    expected = run_job(fake_session.workspace, pd.DataFrame(
        {"price": [1.5, 2.0, 4.0], "qty": [1, 2, 3]}))
    assert fake_session.namespace["results"] == [expected] == [7.5 * 6]
    changing = [c for c in fake_session.calls if c[0] == "POST"]
    assert changing and {actor for _, _, actor in changing} == {"agent via MCP"}


async def test_a_fix_that_fails_again_brings_the_new_failure(
    fake_session: FakeSession, tmp_path: Path
) -> None:
    async with mcp_agent(tmp_path, "--local") as agent:
        wrong_fix = FIX.replace('+    return df["price"]', '+    return df["quantity"]')
        assert not (await agent.call("apply_diff", diff=wrong_fix)).is_error
        resumed = json.loads(text_of(await agent.call("resume")))
    assert resumed["outcome"] == "failed again"
    assert resumed["status"]["attempt"] == 1
    assert "quantity" in resumed["status"]["error"]
    assert resumed["new_failure"]["exception"]["type"] == "KeyError"


async def test_read_only_refuses_what_changes_the_session_and_says_how_to_allow_it(
    fake_session: FakeSession, tmp_path: Path
) -> None:
    async with mcp_agent(tmp_path, "--local", "--read-only") as agent:
        for tool, arguments in (("evaluate", {"code": "1"}), ("apply_diff", {"diff": FIX}),
                                ("write_file", {"path": "x.py", "content": ""}),
                                ("resume", {}), ("abort", {})):
            result = await agent.call(tool, **arguments)
            assert result.is_error, tool
            assert "--read-only" in text_of(result) and "podcode mcp" in text_of(result)
        assert not (await agent.call("describe_failure")).is_error
        read = text_of(await agent.call("read_file", path="job.py"))
        assert read.splitlines()[:5:4] == ["job.py: lines 1-5 of 5", "     4\tdef total(df):"]
        found = text_of(await agent.call("search_code", pattern=r"df\[", glob="*.py"))
        assert found == 'job.py:5:     return df["prise"].sum() * df["qty"].sum()'
    assert [c for c in fake_session.calls if c[0] == "POST"] == []
    assert (fake_session.workspace / "job.py").read_text() == JOB
    assert fake_session.state == "waiting"


async def test_the_token_is_in_no_byte_the_server_writes(
    fake_session: FakeSession, tmp_path: Path
) -> None:
    token, password = fake_session.token, fake_session.password
    (fake_session.workspace / "conf.py").write_text(f"TOKEN = {token!r}\nPW = {password!r}\n")
    fake_session.namespace.update(token=token, png=Png())
    async with mcp_agent(tmp_path, "--local") as agent:
        said = [
            await agent.call("evaluate", code=f"print({token!r}); {password!r}"),
            await agent.call("evaluate", code="raise ValueError(token)"),
            await agent.call("evaluate", code="png"),
            await agent.call("search_code", pattern="TOKEN"),
            await agent.call("read_file", path="conf.py"),
            await agent.call("list_sessions"),
            await agent.call("frame_locals", frame=7),
            await agent.call("describe_failure", session=f"local/{token}"),
        ]
        said.append(await agent.call("write_file", path="leak.py", content=token))
        said.append(await agent.call("show_edits"))
    texts = [text_of(result) for result in said]
    assert all(HIDDEN in texts[i] for i in (0, 1, 3, 4, 7, 9)), texts
    image = said[2].content[-1]
    assert (image.type, base64.b64decode(image.data)) == ("image", Png().data)
    received = agent.received()
    assert received and b"local/4242-1" in received
    for secret in (token, password):
        assert secret.encode() not in received
    authorized = [c for c in fake_session.calls if c[1].startswith(routes.API)]
    assert authorized, "the server reached the session with its token"
