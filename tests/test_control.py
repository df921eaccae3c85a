"""The control API over real HTTP on loopback."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from interactive.control import ControlServer
from interactive.errors import ResumeConflict
from interactive.ports import listen_socket
from interactive.state import SessionState


class Controls:
    def __init__(self) -> None:
        self.now = 1000.0
        self.state = SessionState("m.task", clock=lambda: self.now)
        self.calls: list[str] = []

    def resume(self, peer: bool = False) -> None:
        if self.state.state != "waiting":
            raise ResumeConflict(f"cannot resume: the task is {self.state.state}")
        self.calls.append("resume from a peer" if peer else "resume")

    def abort(self, peer: bool = False) -> None:
        self.calls.append("abort from a peer" if peer else "abort")

    def peer_status(self) -> dict[str, Any]:
        return {"rank": {"rank": 1, "world_size": 2}, "ranks": [{"local_rank": 0}]}

    def keepalive(self, seconds: float) -> float | None:
        self.calls.append(f"keepalive {seconds:g}")
        return self.now + seconds


@pytest.fixture
async def api():
    controls = Controls()
    server = ControlServer(controls, "s3cret", listen_socket("127.0.0.1", 0))
    await server.start()
    async with aiohttp.ClientSession(
        server.url, headers={"Authorization": "Bearer s3cret"}
    ) as client:
        yield controls, client, server.url
    await server.stop()


async def test_everything_under_api_needs_the_token(api) -> None:
    controls, client, url = api
    async with aiohttp.ClientSession(url) as anonymous:
        for method, path in [
            ("GET", "/api/status"),
            ("POST", "/api/resume"),
            ("POST", "/api/keepalive"),
            ("POST", "/api/activity"),
            ("POST", "/api/abort"),
        ]:
            async with anonymous.request(method, path) as response:
                assert response.status == 401
            async with anonymous.request(
                method, path, headers={"Authorization": "Bearer s3cre"}
            ) as response:
                assert response.status == 401
        async with anonymous.get("/healthz") as response:
            assert response.status == 200
    assert controls.calls == []


async def test_status_and_activity_touch(api) -> None:
    controls, client, _ = api
    controls.state.set(state="waiting", error="ValueError: x")
    controls.now += 30
    async with client.get("/api/status") as response:
        body = await response.json()
    assert (
        body["state"] == "waiting"
        and body["error"] == "ValueError: x"
        and body["idle_seconds"] == 30  # polling the status (an open IDE tab does) is not activity
    )
    controls.now += 5
    async with client.post("/api/activity", json={"kind": "typing"}) as response:
        assert response.status == 200
    assert controls.state.last_activity == controls.now


async def test_resume_conflict_and_abort(api) -> None:
    controls, client, _ = api
    async with client.post("/api/resume") as response:
        assert response.status == 409 and "running" in (await response.json())["error"]
    controls.state.set(state="waiting")
    async with client.post("/api/resume") as response:
        assert response.status == 202
    async with client.post("/api/abort") as response:
        assert response.status == 202
    assert controls.calls == ["resume", "abort"]


async def test_calls_forwarded_by_a_peer_rank_are_marked_and_status_shows_the_ranks(api) -> None:
    controls, client, _ = api
    controls.state.set(state="waiting")
    peer = {"X-Podcode-Peer": "1"}
    async with client.post("/api/resume", headers=peer) as response:
        assert response.status == 202
    async with client.post("/api/abort", headers=peer) as response:
        assert response.status == 202
    async with client.get("/api/status") as response:
        body = await response.json()
    assert controls.calls == ["resume from a peer", "abort from a peer"]
    assert body["rank"]["rank"] == 1 and body["ranks"] == [{"local_rank": 0}]


async def test_keepalive_validates_seconds(api) -> None:
    controls, client, _ = api
    async with client.post("/api/keepalive", json={"seconds": 600}) as response:
        assert response.status == 200 and (await response.json())["reap_at"] == controls.now + 600
    for bad in ({"seconds": -1}, {"seconds": "x"}, {"seconds": True}):
        async with client.post("/api/keepalive", json=bad) as response:
            assert response.status == 400
    async with client.post(
        "/api/keepalive", data="not json", headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 400
    assert controls.calls == ["keepalive 600"]
