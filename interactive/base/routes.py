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

FRAMES: Final = "/api/frames"
"""``GET``: the failure (exception type, message, traceback text) and the failed call's
frames, innermost first: ``{"exception": {...}, "frames": [{"index", "function", "file",
"line", "source"}]}``."""
LOCALS: Final = "/api/frames/{index}/locals"
"""``GET``: the locals of frame ``index`` (0 = innermost), each summarised within a bound:
``{"frame": index, "locals": [{"name", "type", "summary"}], "left_out": n}``."""
EVALUATE: Final = "/api/evaluate"
"""``POST {"code", "frame": index, "timeout": s}``: run ``code`` in frame ``index`` as a
notebook cell runs (same caps, interrupted after ``timeout``); the cell's answer."""
WORKSPACE_FILE: Final = "/api/workspace/file"
"""``GET ?path=REL[&start=N&end=M]``: a text file of the workspace, lines numbered, bounded."""
WORKSPACE_SEARCH: Final = "/api/workspace/search"
"""``GET ?pattern=REGEX[&glob=GLOB]``: matching lines in the workspace's text files,
bounded: ``{"matches": [{"path", "line", "text"}], "truncated": bool}``."""
EDITS: Final = "/api/edits"
"""``GET``: the edits since the session opened, as a unified diff: ``{"diff", "files"}``."""

ACTOR_HEADER: Final = "X-Podcode-Actor"
"""Who makes a call on the engineer's behalf (``agent via MCP``): the session records every
call that changes something under that name, and refuses every such call where agents are
not allowed."""
PEER_HEADER: Final = "X-Podcode-Peer"
"""Set on a call one rank forwards to another: the receiving rank does not forward it."""


def locals_of(index: int) -> str:
    """The path of frame ``index``'s locals."""
    return LOCALS.format(index=index)


def login(nonce: str) -> str:
    """The path that redeems ``nonce`` (already quoted for a URL)."""
    return LOGIN.format(nonce=nonce)
