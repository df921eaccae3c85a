"""An agent's calls (they carry the actor header): recorded when they change something,
refused where agents are not let in, never let into the IDE's login."""

from __future__ import annotations

import aiohttp

from interactive.base import routes
from interactive.base.state import MAX_ACTIONS, SessionState
from tests.cli_fixture import Controls, served_api

AGENT = {routes.ACTOR_HEADER: "agent via MCP"}


async def test_an_agents_changes_are_recorded_and_its_reads_are_not() -> None:
    controls = Controls("waiting")
    async with served_api(controls) as (client, _):
        async with client.get(routes.STATUS, headers=AGENT) as answer:
            assert answer.status == 200
        async with client.post(routes.KEEPALIVE, json={"seconds": 60}, headers=AGENT) as answer:
            assert answer.status == 200
        async with client.post(routes.KEEPALIVE, json={"seconds": -1}, headers=AGENT) as answer:
            assert answer.status == 400
        async with client.post(routes.RESUME) as answer:  # the engineer's own: not an agent's
            assert answer.status == 202
        async with client.get(routes.STATUS) as answer:
            actions = (await answer.json())["actions"]
    assert [(a["actor"], a["action"], a["status"]) for a in actions] == [
        ("agent via MCP", "keepalive", 200), ("agent via MCP", "keepalive", 400)]


async def test_agents_are_refused_naming_the_setting_and_never_log_in() -> None:
    controls = Controls("waiting")
    controls.state.last_activity = 0.0
    async with served_api(controls, agents=False) as (client, _):
        async with client.post(routes.RESUME, headers=AGENT) as answer:
            assert answer.status == 403
            assert "PODCODE_AGENTS=0" in (await answer.json())["error"]
        async with client.get(routes.STATUS) as answer:
            assert answer.status == 200 and (await answer.json())["actions"] == []
    assert controls.calls == []  # nothing was done for the agent
    assert controls.state.last_activity == 0.0  # nor did its call keep the session alive
    async with served_api(Controls("waiting"), password="pw") as (client, _):
        async with client.post(routes.LOGIN_LINK, json={"ide": "http://127.0.0.1:1/"},
                               headers=AGENT) as answer:
            assert answer.status == 403 and "log in" in (await answer.json())["error"]
        async with client.post(routes.LOGIN_LINK) as answer:  # the engineer's link
            nonce = (await answer.json())["nonce"]
        link = f"{routes.login(nonce)}?ide=http://127.0.0.1:1/"
        async with aiohttp.ClientSession(client._base_url) as anyone:
            async with anyone.get(link, headers=AGENT) as answer:
                assert answer.status == 403 and "pw" not in await answer.text()
            async with anyone.get(link) as answer:  # the link was not spent by the refusal
                assert answer.status == 200 and "pw" in await answer.text()


def test_the_record_of_actions_is_bounded_and_counts_what_it_dropped() -> None:
    state = SessionState("t", clock=lambda: 5.0)
    for i in range(MAX_ACTIONS + 3):
        state.act("agent", f"evaluate {i}\n" + "x" * 500, 200)
    status = state.status()
    assert len(status["actions"]) == MAX_ACTIONS and status["actions_dropped"] == 3
    assert status["actions"][0]["action"].startswith("evaluate 3 xxx")
    assert len(status["actions"][0]["action"]) == 200 and status["actions"][0]["at"] == 5.0
