"""A resumed task succeeded: save the engineer's fix, say where it is, mail it to the owner."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interactive.session.core import Session
    from interactive.storage.workspace import Snapshot

log = logging.getLogger(__name__)


NOTIFIER_WAIT_SECONDS = 10.0
"""How long a fix's delivery waits for the session's monitor to choose the notifier (it
does once it has found its pod, whose annotation may name the owner)."""


def deliver_fix(session: Session) -> None:
    """Save the edits made since the session opened, print how to apply them, and mail
    them to the owner (on a thread of its own: a mail server never holds the task)."""
    url = session.save_edits()
    if url is None or session.snapshot is None:
        return
    name = session.task.name
    print(
        f"podcode: your fix of {name} is saved in {url}; apply it to your checkout with: "
        f"podcode edits {name} | git apply",
        flush=True,
    )
    # A resume may come before the monitor found the pod and its owner: wait for them.
    session.notifier_known.wait(NOTIFIER_WAIT_SECONDS)
    if session.notifier is not None:
        _mail_fix(session, url, session.snapshot)


def _mail_fix(session: Session, url: str, snapshot: Snapshot) -> None:
    from interactive.culler.notify import send_in_background
    from interactive.kube.labels import describe_pod
    from interactive.storage.edits import git_prefix
    from vscode_config.mail import ResumedMail, render_resumed

    mail = ResumedMail(
        pod=describe_pod(session.pod, None),
        task=session.task.name,
        finished_at=session.clock(),
        edits_url=url,
        patch=snapshot.diff(prefix=git_prefix(snapshot.root)).encode(),
        changed=snapshot.changed(),
    )
    send_in_background(session.notifier.send, render_resumed(mail))
