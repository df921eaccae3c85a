"""The control API's paths, written once: the server's route table and every client
(the CLI, the notebook kernel, the other ranks, the companion extension's
``lib/client.js``, which a test keeps equal to these) name them from here."""

from __future__ import annotations

from typing import Final

HEALTHZ: Final = "/healthz"
"""Open: whether the control API answers."""
API: Final = "/api/"
"""Everything under it needs the session's bearer token."""

STATUS: Final = "/api/status"
RESUME: Final = "/api/resume"
KEEPALIVE: Final = "/api/keepalive"
ACTIVITY: Final = "/api/activity"
ABORT: Final = "/api/abort"

FILES: Final = "/api/files"
"""Files edited on the laptop, written into the session's workspace."""
SSH_KEY: Final = "/api/ssh-key"
"""A public key the session's SSH endpoint then accepts."""
LOGIN_LINK: Final = "/api/login-link"
"""A one-time nonce that logs a browser in to the IDE."""
LOGIN: Final = "/login/{nonce}"
"""Open: where that nonce is redeemed (the route's pattern; :func:`login` fills it)."""

NOTEBOOK_OPEN: Final = "/api/notebook/open"
NOTEBOOK_EXECUTE: Final = "/api/notebook/execute"
NOTEBOOK_INTERRUPT: Final = "/api/notebook/interrupt"

PEER_HEADER: Final = "X-Podcode-Peer"
"""Set on a call one rank forwards to another: the receiving rank does not forward it."""


def login(nonce: str) -> str:
    """The path that redeems ``nonce`` (already quoted for a URL)."""
    return LOGIN.format(nonce=nonce)
