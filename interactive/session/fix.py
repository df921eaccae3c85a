"""A resumed task succeeded: say where the engineer's fix is, mail it to the owner."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interactive.storage.workspace import Snapshot

log = logging.getLogger(__name__)


NOTIFIER_WAIT_SECONDS = 10.0
"""How long a fix's delivery waits for the session's monitor to choose the notifier (it
does once it has found its pod, whose annotation may name the owner)."""


def deliver_fix(
    task: str, url: str | None, snapshot: Snapshot | None, *,
    notifier: Callable[[float], Any], pod: Any, clock: Callable[[], float],
) -> None:
    """Print how to apply the fix saved in ``url`` (None: nothing was saved) and mail it to
    the owner (on a thread of its own: a mail server never holds the task).

    ``notifier(timeout)``: who mails the owner (its ``send(rendered)``), once the session's
    monitor chose it within ``timeout`` seconds (a resume may come before the monitor found
    the pod and its owner), or None."""
    if url is None or snapshot is None:
        return
    print(
        f"podcode: your fix of {task} is saved in {url}; apply it to your checkout with: "
        f"podcode edits {task} | git apply",
        flush=True,
    )
    mailer = notifier(NOTIFIER_WAIT_SECONDS)
    if mailer is not None:
        _mail_fix(mailer, task, url, snapshot, pod, clock())


def _mail_fix(
    notifier: Any, task: str, url: str, snapshot: Snapshot, pod: Any, finished_at: float
) -> None:
    from interactive.kube.labels import describe_pod
    from interactive.reaper.notify import send_in_background
    from interactive.storage.edits import git_prefix
    from vscode_config.mail import ResumedMail, render_resumed

    mail = ResumedMail(
        pod=describe_pod(pod, None),
        task=task,
        finished_at=finished_at,
        edits_url=url,
        patch=snapshot.diff(prefix=git_prefix(snapshot.root)).encode(),
        changed=snapshot.changed(),
    )
    send_in_background(notifier.send, render_resumed(mail))
