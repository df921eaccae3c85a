"""Ask a local HTTP server whether it answers: the readiness check of the IDE servers."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import urllib.parse


def url_host(bind: str) -> str:
    """The host to reach ``bind`` from this machine, bracketed for IPv6."""
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        return bind
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "[::1]"
    return f"[{bind}]" if address.version == 6 else bind


async def http_status(url: str, path: str, timeout: float = 2.0) -> int | None:
    """The status code of ``GET {path}`` at ``url``'s host, None when it does not answer
    in ``timeout`` seconds. A bare HTTP/1.1 request on asyncio streams: the probe runs
    while a session starts, and importing an HTTP client would delay the launch."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        status = (await asyncio.wait_for(reader.readline(), timeout)).split()[1:2]
        return int(status[0]) if status and status[0].isdigit() else None
    except (OSError, asyncio.TimeoutError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
