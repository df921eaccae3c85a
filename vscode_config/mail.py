"""The owner's emails: a warning before cleanup and a report after it.

Pure rendering: values in, subject and bodies out. Plain text comes from
``email_<kind>.txt.j2``; HTML from ``email_<kind>.html.j2`` with autoescape,
so a task name such as ``<script>`` is shown, never run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from vscode_config.templates import render

SUBJECT_PREFIX = "[podcode]"
MAX_LISTED_FILES = 50
MAX_LISTED_ACTIONS = 30
"""The newest actions of coding agents a final email lists."""
"""Changed files named in the final email; the rest are counted."""


@dataclass(frozen=True)
class Rendered:
    subject: str
    text: str
    html: str
    attachments: tuple[tuple[str, bytes], ...] = ()
    """``(file name, content)`` of text files to attach."""


@dataclass(frozen=True)
class WarningMail:
    """What the owner needs to decide whether to keep the session."""

    pod: str
    """``namespace/name`` of the pod, or the host name outside Kubernetes."""
    task: str
    idle_since: float
    """Seconds since the epoch."""
    sent_at: float
    reap_at: float
    keepalive_command: str
    """The command that keeps the session, e.g. ``podcode keepalive my-pod -n ml``."""
    notes: Sequence[str] = ()
    """What the session said about itself (inputs not kept as at the call, say)."""


@dataclass(frozen=True)
class FinalMail:
    """What was cleaned up and where the edits went."""

    pod: str
    task: str
    idle_since: float
    reaped_at: float
    edits_url: str | None
    """Where the edits were saved; None when they could not be saved."""
    changed: Sequence[str] = ()
    problems: Sequence[str] = field(default_factory=tuple)
    """Cleanup steps that failed, one line each."""
    notes: Sequence[str] = ()
    """What the session said about itself (inputs not kept as at the call, say)."""
    actions: Sequence[dict[str, Any]] = ()
    """What coding agents did in the session (``GET /api/status``'s ``actions``)."""
    actions_dropped: int = 0
    """Older actions the session no longer kept."""


def action_line(action: dict[str, Any]) -> str:
    """``2024-05-01 13:45:00 UTC agent via MCP: resume (202)``."""
    at = action.get("at")
    when = utc(at) if isinstance(at, (int, float)) else "-"
    answered = f" ({action['status']})" if action.get("status") is not None else ""
    return f"{when} {action.get('actor', '?')}: {action.get('action', '?')}{answered}"


def utc(when: float) -> str:
    """``2024-05-01 13:45:00 UTC``."""
    return datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def minutes(seconds: float) -> int:
    return max(0, round(seconds / 60))


def render_warning(mail: WarningMail) -> Rendered:
    values: dict[str, Any] = {
        "pod": mail.pod,
        "task": mail.task,
        "idle_since": utc(mail.idle_since),
        "idle_minutes": minutes(mail.sent_at - mail.idle_since),
        "reap_at": utc(mail.reap_at),
        "grace_minutes": minutes(mail.reap_at - mail.sent_at),
        "keepalive_command": mail.keepalive_command,
        "notes": list(mail.notes),
    }
    subject = f"{SUBJECT_PREFIX} {mail.task} on {mail.pod} is idle: cleanup at {utc(mail.reap_at)}"
    return _render("warning", subject, values)


def render_final(mail: FinalMail) -> Rendered:
    values: dict[str, Any] = {
        "pod": mail.pod,
        "task": mail.task,
        "idle_since": utc(mail.idle_since),
        "reaped_at": utc(mail.reaped_at),
        "edits_url": mail.edits_url,
        "changed": list(mail.changed[:MAX_LISTED_FILES]),
        "more": max(0, len(mail.changed) - MAX_LISTED_FILES),
        "problems": list(mail.problems),
        "notes": list(mail.notes),
        "actions": [action_line(a) for a in mail.actions[-MAX_LISTED_ACTIONS:]],
        "earlier_actions": max(0, len(mail.actions) - MAX_LISTED_ACTIONS) + mail.actions_dropped,
    }
    subject = f"{SUBJECT_PREFIX} {mail.task} on {mail.pod} was cleaned up"
    return _render("final", subject, values)


@dataclass(frozen=True)
class ResumedMail:
    """The engineer's fix, after the resumed task finished."""

    pod: str
    task: str
    finished_at: float
    edits_url: str
    patch: bytes
    """A unified diff that ``git apply`` accepts."""
    changed: Sequence[str] = ()


def patch_name(task: str) -> str:
    """``podcode-<task>.patch``, safe as a file name."""
    return "podcode-" + "".join(c if c.isalnum() or c in "._-" else "_" for c in task) + ".patch"


def render_resumed(mail: ResumedMail) -> Rendered:
    filename = patch_name(mail.task)
    values: dict[str, Any] = {
        "pod": mail.pod,
        "task": mail.task,
        "finished_at": utc(mail.finished_at),
        "edits_url": mail.edits_url,
        "changed": list(mail.changed[:MAX_LISTED_FILES]),
        "filename": filename,
    }
    subject = f"{SUBJECT_PREFIX} {mail.task} on {mail.pod} resumed and finished: your fix"
    rendered = _render("resumed", subject, values)
    return Rendered(rendered.subject, rendered.text, rendered.html, ((filename, mail.patch),))


def _render(kind: str, subject: str, values: dict[str, Any]) -> Rendered:
    return Rendered(
        subject=" ".join(subject.split()),
        text=render(f"email_{kind}.txt.j2", **values),
        html=render(f"email_{kind}.html.j2", autoescape=True, **values),
    )
