"""Resume: what the engineer changed, planned as an in-place patch, checked before it runs.

The plan is made when the resume is asked for, so that an edit which cannot be
patched, or a signature the captured inputs no longer fit, is refused at once with
the reason (HTTP 409, shown in the IDE and by ``podcode resume``) while the session
keeps waiting. Planning walks the workspace (up to 20k files) and may scan the heap:
it runs on a thread of its own, never on an event loop (the control API and the
notebook hand it one). The plan is applied on the task's own thread (an ``async def``
task's loop), just before the task runs again.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interactive.base.errors import ResumeConflict
from interactive.resume.patching import Plan, Unpatchable, plan
from interactive.storage.workspace import Snapshot

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ArgShape:
    """How the task was called: enough to check that a new signature still binds."""

    positional: int
    keywords: tuple[str, ...]

    @classmethod
    def of(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ArgShape:
        return cls(len(args), tuple(kwargs))


@dataclass(frozen=True)
class Resume:
    """A planned resume: the patch, and the workspace as it was read for it."""

    plan: Plan
    base: Snapshot
    """The next resume patches what changes after this."""


def edits_since(base: Snapshot) -> list[tuple[Path, str, str]]:
    """``(file, text then, text now)`` of each Python file changed since ``base``."""
    edits = []
    for rel in base.changed():
        path = base.root / rel
        if path.suffix != ".py" or not path.exists():
            continue
        if rel in base.stamps and rel not in base.texts:
            raise ResumeConflict(f"cannot patch {rel}: it is too large to compare with its start")
        now = path.read_text(encoding="utf-8", errors="replace")
        edits.append((path, base.texts.get(rel, ""), now))
    return edits


def plan_resume(base: Snapshot, task: Callable[..., Any], shape: ArgShape) -> Resume:
    """The patch for the edits since ``base``; :class:`ResumeConflict` names what cannot
    be applied, or why the captured inputs no longer fit the task."""
    after = Snapshot.take(base.root)
    try:
        patch = plan(edits_since(base), [task])
    except Unpatchable as exc:
        raise ResumeConflict(f"cannot resume: {exc}") from None
    problem = binding_problem(patch.preview(task), shape)
    if problem:
        raise ResumeConflict(f"cannot resume: {problem}")
    return Resume(patch, after)


def binding_problem(task: Callable[..., Any], shape: ArgShape) -> str | None:
    """Why the captured arguments would not bind to ``task`` (None: they do)."""
    try:
        signature = inspect.signature(task)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*range(shape.positional), **dict.fromkeys(shape.keywords))
    except TypeError as exc:
        name = getattr(task, "__qualname__", "the task")
        return (
            f"the captured inputs ({shape.positional} positional"
            f"{', ' + ', '.join(shape.keywords) if shape.keywords else ''}) "
            f"do not fit {name}{signature}: {exc}"
        )
    return None
