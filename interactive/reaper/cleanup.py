"""Cleaning up an idle session, step by step; a failing step never stops the next.

1. the ``on_reap`` hook (at most :data:`HOOK_TIMEOUT_SECONDS`);
2. the workspace's edits saved to the store (:mod:`interactive.storage.edits`);
3. the IDE stopped (code-server's whole process tree);
4. the final email to the owner, saying where the edits are;
5. a ``PodcodeReaped`` event, then the pod deleted (when running in one).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from interactive.base.settings import HookSettings
from interactive.base.state import SessionState
from interactive.base.threads import in_thread
from interactive.base.types import Hook
from interactive.kube.labels import PodHandle, describe_pod
from interactive.reaper.notify import Notifier
from interactive.storage.edits import EditStore, WorkspaceChanges, save_edits
from vscode_config.mail import FinalMail

logger = logging.getLogger(__name__)

HOOK_TIMEOUT_SECONDS = 60.0
"""The ``on_reap`` hook gets this long; a hook still running after it is left behind."""
IDE_STOP_TIMEOUT_SECONDS = 30.0
EMAIL_TIMEOUT_SECONDS = 120.0
"""Sending the final email, retries included."""
T = TypeVar("T")


class StoppableIde(Protocol):
    async def stop(self) -> None: ...


@dataclass
class CleanupReport:
    """What cleanup did; ``problems`` has one line per failed step."""

    hook_ran: bool = False
    edits_url: str | None = None
    changed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Changed files too large to copy."""
    ide_stopped: bool = False
    email_sent: bool = False
    pod_deleted: bool = False
    problems: list[str] = field(default_factory=list)


async def cleanup(
    *,
    state: SessionState,
    hooks: HookSettings,
    snapshot: WorkspaceChanges | None,
    store: EditStore | None,
    ide: StoppableIde | None,
    pod: PodHandle | None,
    notifier: Notifier | None,
    clock: Callable[[], float],
    hook_timeout: float = HOOK_TIMEOUT_SECONDS,
    hostname: str | None = None,
) -> CleanupReport:
    """Run every cleanup step in order; each one isolated and bounded."""
    report = CleanupReport()
    state.set(state="reaping")
    hook = hooks.on_reap
    if hook is not None:
        report.hook_ran = await _step(report, "on_reap hook", run_hook(hook, hook_timeout), False)
    if snapshot is not None and store is not None:
        save = _save(report, snapshot, store, state.task, clock())
        await _step(report, "saving the edits", save, None)
    else:
        report.problems.append("saving the edits: no workspace snapshot or no store")
    if ide is not None:
        stop = asyncio.wait_for(ide.stop(), IDE_STOP_TIMEOUT_SECONDS)
        report.ide_stopped = await _step(report, "stopping the IDE", _true(stop), False)
    if notifier is not None:
        mail = _final_mail(state, report, pod, hostname, clock())
        send = asyncio.wait_for(notifier.send_final(mail), EMAIL_TIMEOUT_SECONDS)
        report.email_sent = await _step(report, "the final email", send, False)
    if pod is not None:
        report.pod_deleted = await _step(report, "deleting the pod", _delete(pod, report), False)
    logger.info("cleanup of %s done: %s", state.task, report)
    return report


async def _step(report: CleanupReport, name: str, work: Awaitable[T], failed: T) -> T:
    try:
        return await work
    except Exception as exc:
        logger.exception("cleanup: %s failed", name)
        detail = f": {exc}" if str(exc) else ""
        report.problems.append(f"{name}: {type(exc).__name__}{detail}")
        return failed


async def _true(work: Awaitable[object]) -> bool:
    await work
    return True


async def run_hook(hook: Hook, timeout: float) -> bool:
    """Call ``hook`` on a thread of its own (an awaitable result is awaited), within
    ``timeout``.

    A hook still running at the bound is left behind (its thread is a daemon,
    so it cannot keep the process alive) and :class:`TimeoutError` is raised.
    """
    started = time.monotonic()
    call = in_thread(hook, "on-reap", service=False)
    try:
        result = await asyncio.wait_for(asyncio.shield(call), timeout)
        if inspect.isawaitable(result):
            left = max(0.0, timeout - (time.monotonic() - started))
            await asyncio.wait_for(result, left)
    except asyncio.TimeoutError:
        raise TimeoutError(f"on_reap did not finish within {timeout:g} s") from None
    return True


async def _save(
    report: CleanupReport, snapshot: WorkspaceChanges, store: EditStore, task: str, when: float
) -> None:
    saved = await asyncio.to_thread(save_edits, snapshot, store, task, when)
    report.edits_url, report.changed, report.skipped = saved.url, saved.changed, saved.too_large


def _final_mail(
    state: SessionState, report: CleanupReport, pod: PodHandle | None, hostname: str | None,
    now: float,
) -> FinalMail:
    return FinalMail(
        pod=describe_pod(pod, hostname),
        task=state.task,
        idle_since=state.last_activity,
        reaped_at=now,
        edits_url=report.edits_url,
        changed=list(report.changed),
        problems=list(report.problems),
        notes=list(state.notes),
        actions=state.status()["actions"],  # copied under the state's lock
        actions_dropped=state.actions_dropped,
    )


async def _delete(pod: PodHandle, report: CleanupReport) -> bool:
    saved = f"edits saved to {report.edits_url}" if report.edits_url else "edits not saved"
    await asyncio.to_thread(pod.event, "PodcodeReaped", f"idle session cleaned up; {saved}")
    deleted = await asyncio.to_thread(pod.delete)
    if not deleted:
        raise RuntimeError("the Kubernetes API did not delete the pod (see the log above)")
    return True
