"""One-time login links: from ``podcode attach`` to the workbench without typing a password.

The control API hands a short-lived, single-use nonce to a caller holding its bearer
token (``POST /api/login-link``). ``GET /login/<nonce>?ide=<code-server URL>`` (no token:
the nonce is the credential) answers once, with a page that posts the password to
code-server's own login form, so code-server sets its session cookie as after a typed
login. The password never appears in a URL (a link in the browser's history is spent),
the page is not cached, and it posts only to a loopback address: where ``podcode
attach`` forwards code-server, or where a local session serves it.
"""

from __future__ import annotations

import html
import ipaddress
import secrets
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web

from interactive.base import routes

LINK_SECONDS = 600.0
"""How long a link may wait to be opened."""
MAX_LINKS = 32
"""Links not yet used, at most (the oldest is dropped first)."""


class LoginLinks:
    """Nonces issued and not yet used, each with its deadline."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._open: dict[str, float] = {}

    def issue(self) -> str:
        now = self._clock()
        self._open = {n: t for n, t in self._open.items() if t > now}
        while len(self._open) >= MAX_LINKS:
            self._open.pop(next(iter(self._open)))
        nonce = secrets.token_urlsafe(24)
        self._open[nonce] = now + LINK_SECONDS
        return nonce

    def redeem(self, nonce: str) -> bool:
        """Whether ``nonce`` was issued and is still valid; it is spent either way."""
        deadline = self._open.pop(nonce, None)
        return deadline is not None and deadline > self._clock()


def loopback_origin(url: str) -> str | None:
    """``http://host:port`` of a code-server URL on a loopback address (None otherwise:
    the page posts the password nowhere else)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "http" or not loopback or parts.port is None:
        return None
    return f"http://{parts.netloc}"


def page(ide_url: str, password: str, script_nonce: str) -> str:
    """Posts ``password`` to code-server's login form at ``ide_url`` (a button without
    JavaScript)."""
    action = html.escape(ide_url.rstrip("/") + "/login", quote=True)
    return (
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>podcode: logging in"
        "</title></head><body>"
        f"<form method=\"post\" action=\"{action}\">"
        f"<input type=\"hidden\" name=\"password\" value=\"{html.escape(password, quote=True)}\">"
        "<button type=\"submit\">Open VS Code</button></form>"
        f"<script nonce=\"{script_nonce}\">document.forms[0].submit();</script>"
        "</body></html>"
    )


def add_routes(app: web.Application, links: LoginLinks, password: str | None) -> None:
    """``POST /api/login-link`` (behind the token) and ``GET /login/{nonce}``."""

    async def issue(request: web.Request) -> web.Response:
        if password is None:
            return web.json_response({"error": "this session's IDE has no password"}, status=409)
        return web.json_response({"nonce": links.issue(), "expires_in": LINK_SECONDS})

    async def redeem(request: web.Request) -> web.Response:
        origin = loopback_origin(request.query.get("ide", ""))
        if password is None or origin is None:
            return _refused("the link names no loopback code-server (?ide=http://127.0.0.1:PORT/)")
        if not links.redeem(request.match_info["nonce"]):
            return _refused("this login link was used or has expired: run podcode open (or podcode "
                            "attach POD) again")
        script_nonce = secrets.token_urlsafe(16)
        return web.Response(
            text=page(request.query["ide"], password, script_nonce), content_type="text/html",
            headers={
                "Cache-Control": "no-store",
                "Referrer-Policy": "no-referrer",
                "Content-Security-Policy": (
                    f"default-src 'none'; script-src 'nonce-{script_nonce}'; "
                    f"form-action {origin}"
                ),
            },
        )

    app.router.add_post(routes.LOGIN_LINK, issue)
    app.router.add_get(routes.LOGIN, redeem)


def _refused(why: str) -> web.Response:
    return web.Response(text=f"podcode: {why}\n", status=404,
                        headers={"Cache-Control": "no-store"})
