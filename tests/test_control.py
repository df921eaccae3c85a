"""The control API over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import aiohttp
import pytest

from interactive.base.errors import ResumeConflict
from interactive.base.ports import listen_socket
from interactive.base.state import SessionState
from interactive.doors.control import ControlServer, OneLineFilter
from tests.cli_fixture import served_api


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
    async with served_api(controls) as (client, url):
        yield controls, client, url


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


@pytest.mark.parametrize("body", [
    "[" * 100_000 + "]" * 100_000,  # deeper than the parser recurses
    '{"seconds": NaN}', '{"seconds": Infinity}', '{"seconds": -Infinity}',
    "[" * 2_000 + "]" * 2_000,  # deep, within the size limit
    "[1, 2]", '"text"', "\xff\xfe", "{",
])
async def test_any_malformed_body_is_a_4xx_never_a_500(api, body: str) -> None:
    controls, client, _ = api
    for path in ("/api/keepalive", "/api/activity"):
        async with client.post(path, data=body.encode("utf-8", "surrogateescape"),
                               headers={"Content-Type": "application/json"}) as response:
            assert 400 <= response.status < 500, (path, response.status)
    assert controls.calls == []


async def test_answers_are_strict_json(api) -> None:
    """A status holding a non-finite number is an error on our side, never ``Infinity``
    on the wire (JSON parsers refuse it)."""
    controls, client, _ = api
    controls.state.set(reap_at=float("inf"))
    async with client.get("/api/status") as response:
        text = await response.text()
    assert "Infinity" not in text and "NaN" not in text


# -- bounds: half-sent requests are cut off; malformed ones are one quiet line --------

TOKEN = "s3cret"


@pytest.fixture
async def quick_api():
    """The API with short deadlines, and a raw connection maker."""
    controls = Controls()
    sock = listen_socket("127.0.0.1", 0)
    server = ControlServer(controls, TOKEN, sock, head_timeout=0.3, body_timeout=0.3)
    await server.start()
    host, port = sock.getsockname()[:2]

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    yield controls, connect
    await server.stop()


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection (60 s at most)."""
    received = b""
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(4096), 60)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


async def answer_to(connect: Any, request: bytes) -> bytes:
    """Send ``request`` (raw bytes) on a new connection; all the server sent until it
    closed the connection."""
    reader, writer = await connect()
    writer.write(request)
    await writer.drain()
    try:
        return await closed_by_server(reader)
    finally:
        writer.close()


async def test_half_sent_request_head_is_cut_off(quick_api) -> None:
    _, connect = quick_api
    request = b"GET /api/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3"
    assert await answer_to(connect, request) == b""  # closed, nothing answered


async def test_a_head_trickled_byte_by_byte_is_cut_off(quick_api) -> None:
    _, connect = quick_api
    reader, writer = await connect()
    head = b"GET /api/status HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 2000
    closed = asyncio.ensure_future(closed_by_server(reader))
    sent = 0
    for byte in head:  # 2000+ bytes at 20 a second would take over 100 s
        if closed.done():
            break
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except ConnectionError:
            break
        sent += 1
        await asyncio.sleep(0.05)
    assert sent < len(head), "the server waited for the whole trickled head"
    await closed
    writer.close()


async def test_a_body_that_never_arrives_gets_408_and_the_connection_closes(quick_api) -> None:
    controls, connect = quick_api
    answer = await answer_to(
        connect,
        b"POST /api/keepalive HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"seconds\"",
    )
    assert answer.startswith(b"HTTP/1.1 408")
    assert controls.calls == []


async def test_an_idle_connection_after_a_request_is_closed(quick_api) -> None:
    _, connect = quick_api
    # keep-alive, yet closed once idle
    answer = await answer_to(connect, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"ok": true}')


MALFORMED = [
    b"Authorization: Bearer s3cret\x00",  # a NUL in a header value
    b"Authorization: Bearer s3cret\n",  # a bare line feed
    b"Authorization : Bearer s3cret",  # a space before the colon
    b"Authorization: Bearer s3cret\r\n folded",  # obsolete line folding
    b"Content-Length: s3cret",
]


@pytest.mark.parametrize("header", MALFORMED)
async def test_malformed_request_is_one_line_without_its_bytes(
    quick_api, header: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    _, connect = quick_api
    caplog.set_level(logging.DEBUG)
    request = b"GET /api/status HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n"
    assert (await answer_to(connect, request)).startswith(b"HTTP/1.0 400")
    ours = ("aiohttp", "interactive.doors.control")
    records = [r for r in caplog.records if r.name.startswith(ours)]
    assert len(records) == 1, [r.getMessage() for r in records]
    (record,) = records
    assert "malformed request from 127.0.0.1 answered 400" in record.getMessage()
    assert record.levelno == logging.INFO and record.exc_info is None and not record.exc_text
    assert TOKEN not in caplog.text and "\n" not in record.getMessage()


async def test_a_header_that_is_not_utf8_is_401_not_a_crash(
    quick_api, caplog: pytest.LogCaptureFixture
) -> None:
    _, connect = quick_api
    request = (
        b"GET /api/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xc3\x28s3cret\r\n"
        b"Connection: close\r\n\r\n"
    )
    assert (await answer_to(connect, request)).startswith(b"HTTP/1.1 401")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_other_errors_keep_their_frames_but_not_their_message() -> None:
    try:
        raise UnicodeError(f"header value Bearer {TOKEN}")
    except UnicodeError as exc:
        record = logging.LogRecord(
            "aiohttp", logging.ERROR, __file__, 1, "Error handling request from %s",
            ("127.0.0.1",), (type(exc), exc, exc.__traceback__),
        )
    assert OneLineFilter().filter(record)
    text = logging.Formatter().format(record)
    assert "UnicodeError while handling a request from 127.0.0.1" in text
    assert "test_other_errors_keep_their_frames" in text  # where it happened
    assert TOKEN not in text


async def test_a_status_request_with_the_version_seen_waits_for_the_next_change(api) -> None:
    controls, client, _ = api
    async with client.get("/api/status") as response:
        seen = (await response.json())["version"]
    waiting = asyncio.ensure_future(client.get(f"/api/status?version={seen}&wait=60"))
    await asyncio.sleep(0.3)
    assert not waiting.done(), "nothing changed yet: the answer is held"
    threading.Thread(target=lambda: controls.state.set(state="waiting")).start()
    # Woken by the change (from another thread), long before the wait of 60 s ends.
    async with await asyncio.wait_for(waiting, 20) as response:
        body = await response.json()
    assert body["state"] == "waiting" and body["version"] == seen + 1
    async with client.get(f"/api/status?version={seen}&wait=30") as response:
        assert (await response.json())["version"] == seen + 1  # news already: at once
    async with client.get(f"/api/status?version={seen + 1}&wait=0.2") as response:
        assert response.status == 200  # no news within the wait: the status as it is
    async with client.get("/api/status?version=x&wait=nan") as response:
        assert response.status == 200  # a bad query is a plain status request
