"""Which decorated task is running in this thread of execution."""

from __future__ import annotations

from contextvars import ContextVar

current_task: ContextVar[str | None] = ContextVar("podcode_current_task", default=None)
"""Qualified name (``module.qualname``) of the decorated task being run, if any."""
