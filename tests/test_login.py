"""One-time login links: issued behind the token, spent at first use, short-lived, and
posting the password only to a loopback code-server."""

from __future__ import annotations

import aiohttp
import pytest

from interactive.base.ports import listen_socket
from interactive.base.state import SessionState
from interactive.doors.control import ControlServer
from interactive.doors.login import LINK_SECONDS, LoginLinks, loopback_origin

IDE = "http://127.0.0.1:8080/"


class Controls:
    """What the API steers; these tests call none of it."""

    def __init__(self) -> None:
        self.state = SessionState("m.task")

    def resume(self, peer: bool = False) -> None: ...

    def abort(self, peer: bool = False) -> None: ...

    def peer_status(self) -> dict[str, object]:
        return {}

    def keepalive(self, seconds: float) -> float | None:
        return None


def test_a_link_is_used_once_and_expires() -> None:
    now = [0.0]
    links = LoginLinks(clock=lambda: now[0])
    first, second = links.issue(), links.issue()
    assert first != second and len(first) >= 32
    assert links.redeem(first) and not links.redeem(first), "spent at its first use"
    now[0] = LINK_SECONDS + 1
    assert not links.redeem(second), "expired"
    assert not links.redeem("made-up")


@pytest.mark.parametrize(("url", "origin"), [
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
    ("http://localhost:41234/", "http://localhost:41234"),
    ("http://[::1]:8080/", "http://[::1]:8080"),
    ("http://10.0.0.5:8080/", None),
    ("http://evil.example.com:8080/", None),
    ("https://127.0.0.1:8080/", None),
    ("http://127.0.0.1/", None),
    ("javascript:alert(1)", None),
])
def test_the_password_goes_only_to_a_loopback_code_server(url: str, origin: str | None) -> None:
    assert loopback_origin(url) == origin


@pytest.fixture
async def server():
    running = ControlServer(Controls(), "s3cret", listen_socket("127.0.0.1", 0),
                            password="pa55-word")
    await running.start()
    yield running
    await running.stop()


async def test_the_link_page_posts_the_password_once_and_is_not_cached(server) -> None:
    async with aiohttp.ClientSession(server.url) as anonymous:
        async with anonymous.post("/api/login-link") as refused:
            assert refused.status == 401, "issued only behind the token"
        async with anonymous.post("/api/login-link",
                                  headers={"Authorization": "Bearer s3cret"}) as issued:
            nonce = (await issued.json())["nonce"]
        async with anonymous.get(f"/login/{nonce}", params={"ide": "http://evil.example:80/"}
                                 ) as elsewhere:
            assert elsewhere.status == 404 and "loopback" in await elsewhere.text()
        async with anonymous.get(f"/login/{nonce}", params={"ide": IDE}) as opened:
            body = await opened.text()
            assert opened.status == 200
            assert 'action="http://127.0.0.1:8080/login"' in body and "pa55-word" in body
            assert opened.headers["Cache-Control"] == "no-store"
            assert "form-action http://127.0.0.1:8080" in opened.headers["Content-Security-Policy"]
        async with anonymous.get(f"/login/{nonce}", params={"ide": IDE}) as again:
            assert again.status == 404 and "used or has expired" in await again.text()
