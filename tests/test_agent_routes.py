"""The agent's routes against a served control API with a fake session: what each refuses
and why, the failure's frames numbered from where it raised, and no secret in any answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interactive.base import routes
from interactive.base.phases import Phase
from tests.cli_fixture import served_api
from tests.notebook_fixture import Host, failure_of_failing

TOKEN = "s3cret-token-for-the-test"


async def _text(answer: Any) -> tuple[int, str]:
    return answer.status, await answer.text()


async def test_bad_requests_are_refused_saying_why(tmp_path: Path) -> None:
    host, failure = Host(tmp_path), failure_of_failing()
    async with served_api(host, token=TOKEN, password="pw-secret",
                          failure=lambda: failure) as (client, _):
        asked = [
            ("POST", routes.EVALUATE, {"code": ""}, 400, "expected"),
            ("POST", routes.EVALUATE, {"code": "1", "timeout": 0}, 400, "timeout must be"),
            ("POST", routes.EVALUATE, {"code": "1", "frame": "two"}, 400, "whole number"),
            ("GET", routes.locals_of(7), None, 400, "no frame 7: the failure has"),
            ("GET", "/api/frames/x/locals", None, 400, "whole number"),
            ("GET", routes.WORKSPACE_FILE, None, 400, "expected ?path="),
            ("GET", f"{routes.WORKSPACE_FILE}?path=nothing.py", None, 404, "no such file"),
            ("GET", routes.WORKSPACE_SEARCH, None, 400, "expected ?pattern="),
            ("GET", f"{routes.WORKSPACE_SEARCH}?pattern=%5B", None, 400, "not a valid"),
        ]
        for method, path, body, status, words in asked:
            async with client.request(method, path, json=body) as answer:
                got, text = await _text(answer)
            assert got == status and words in text, (path, got, text)
            assert TOKEN not in text and "pw-secret" not in text
        async with client.get(routes.FRAMES) as answer:
            frames = await answer.json()
        assert [f["function"] for f in frames["frames"]][:2] == ["_failing", "failure_of_failing"]
        current = [line for line in frames["frames"][0]["source"].splitlines()
                   if line.startswith("->")]
        assert len(current) == 1 and "raise ValueError" in current[0]
        async with client.get(routes.locals_of(0)) as answer:
            names = {v["name"]: v["summary"] for v in (await answer.json())["locals"]}
        assert names == {"rows": "length=2 [5, 7]", "total": "12"}


async def test_nothing_is_read_while_the_task_does_not_wait(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.snapshot = None
    host.state.set(state=Phase.RESUMING)
    async with served_api(host, token=TOKEN, failure=failure_of_failing) as (client, _):
        for path in (routes.FRAMES, routes.locals_of(0)):
            async with client.get(path) as answer:
                assert answer.status == 409 and "the task is resuming" in await answer.text()
        async with client.post(routes.EVALUATE, json={"code": "1"}) as answer:
            assert answer.status == 409
        async with client.get(routes.EDITS) as answer:
            assert answer.status == 409 and "not open yet" in await answer.text()


async def test_a_session_opened_before_the_task_ran_says_so(tmp_path: Path) -> None:
    served = served_api(Host(tmp_path), token=TOKEN, failure=lambda: None)
    async with served as (client, _), client.get(routes.FRAMES) as answer:
        assert answer.status == 409 and "opened before it ran" in await answer.text()
