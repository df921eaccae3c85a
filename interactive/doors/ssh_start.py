"""Whether a session serves SSH, and starting it (:mod:`interactive.doors.ssh`).

SSH is on unless ``ssh=False``; without asyncssh installed it is off, and the session
says so when it was asked for by name. A problem with it (no free port, an
``ssh_authorized_keys`` that cannot be read) is a note on the session, never a reason
for the session not to open: the browser IDE and ``podcode debug`` still work.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interactive.base.errors import SessionError
from interactive.base.loop import LoopThread
from interactive.base.ports import bind_free
from interactive.base.settings import Settings
from interactive.base.state import SessionState

if TYPE_CHECKING:
    from interactive.doors.ssh import SshEndpoint

log = logging.getLogger(__name__)

NOT_INSTALLED = "SSH is off: asyncssh is not installed (pip install 'podcode[ssh]')"


def start_ssh(loop: LoopThread, settings: Settings, *, bind: str, port: int, workspace: Path,
              session: str, state: SessionState) -> SshEndpoint | None:
    """The started endpoint, or None (off, not installed, or it could not start: noted)."""
    if not settings.editor.ssh:
        return None
    try:
        from interactive.doors import ssh
    except ImportError:
        if "ssh" in settings.names:
            state.note(NOT_INSTALLED)
        log.debug("%s", NOT_INSTALLED)
        return None
    try:
        keys = ssh.authorized_keys_from(settings.editor.ssh_authorized_keys)
    except ssh.KeyError_ as exc:
        state.note(f"SSH accepts only the keys podcode ssh pushes: {exc}")
        keys = []
    try:
        sock = bind_free(bind, port, "ssh_port")
    except (SessionError, OSError) as exc:
        state.note(f"SSH is off: {exc}")
        return None
    endpoint = ssh.SshEndpoint(
        sock, workspace=workspace, environ=ssh.task_environ(os.environ, session),
        activity=ssh.Activity(state.touch, state.clock), keys=keys,
    )
    loop.call(endpoint.start(), 30)
    return endpoint


def record_fields(endpoint: SshEndpoint | None) -> dict[str, Any]:
    """What the session's record says of its SSH endpoint (nothing when there is none)."""
    if endpoint is None:
        return {}
    return {"ssh_port": endpoint.port, "ssh_host_key": endpoint.host_public_key}
