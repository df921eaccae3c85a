"""Cleaning up an idle session, step by step; a failing step never stops the next.

1. the ``on_reap`` hook (at most :data:`HOOK_TIMEOUT_SECONDS`);
2. the workspace's edits saved to the store under
   ``edits/<task>/<UTC time>/``: ``changes.diff``, ``manifest.json`` and the
   changed files under ``files/``;
3. the IDE stopped (code-server's whole process tree);
4. the final email to the owner, saying where the edits are;
5. a ``PodcodeReaped`` event, then the pod deleted (when running in one).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from interactive.notify import Notifier
from interactive.state import SessionState
from interactive.types import Hook
from interactive.workspace import git_prefix
from vscode_config.mail import FinalMail

if TYPE_CHECKING:
    from interactive.monitor import PodHandle

logger = logging.getLogger(__name__)

HOOK_TIMEOUT_SECONDS = 60.0
"""The ``on_reap`` hook gets this long; a hook still running after it is left behind."""
IDE_STOP_TIMEOUT_SECONDS = 30.0
EMAIL_TIMEOUT_SECONDS = 120.0
"""Sending the final email, retries included."""
MAX_EDIT_FILE_BYTES = 64 * 1024 * 1024
"""A changed file larger than this is listed in the manifest but not copied."""

T = TypeVar("T")


class WorkspaceChanges(Protocol):
    """What :class:`interactive.workspace.Snapshot` offers."""

    root: Path

    def changed(self) -> list[str]: ...

    def diff(self, paths: list[str] | None = None, prefix: str = "") -> str: ...


class EditStore(Protocol):
    """What :class:`interactive.store.Store` offers."""

    def put_file(self, rel_path: str, local: Path) -> None: ...

    def put_bytes(self, rel_path: str, data: bytes) -> None: ...

    def url_for(self, rel_path: str) -> str: ...


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
    settings: Any,
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
    hook = getattr(settings, "on_reap", None)
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
    """Call ``hook`` on a daemon thread (an awaitable result is awaited), within ``timeout``.

    A hook still running at the bound is left behind (its thread is a daemon,
    so it cannot keep the process alive) and :class:`TimeoutError` is raised.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def call() -> None:
        try:
            result: Any = hook()
        except BaseException as exc:
            loop.call_soon_threadsafe(_settle, done, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, done, result, None)

    started = time.monotonic()
    threading.Thread(target=call, name="podcode-on-reap", daemon=True).start()
    try:
        result = await asyncio.wait_for(asyncio.shield(done), timeout)
        if inspect.isawaitable(result):
            left = max(0.0, timeout - (time.monotonic() - started))
            await asyncio.wait_for(result, left)
    except asyncio.TimeoutError:
        raise TimeoutError(f"on_reap did not finish within {timeout:g} s") from None
    return True


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def edits_folder(task: str, when: float) -> str:
    """``edits/<task>/<YYYYmmddTHHMMSSZ>`` (the task name made path-safe)."""
    stamp = datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{_task_edits(task)}/{stamp}"


def latest_patch(task: str) -> str:
    """``edits/<task>/latest.diff``: the last patch saved for the task (``podcode edits``)."""
    return f"{_task_edits(task)}/latest.diff"


def _task_edits(task: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task).strip("._") or "task"
    return f"edits/{safe}"


async def _save(
    report: CleanupReport, snapshot: WorkspaceChanges, store: EditStore, task: str, when: float
) -> None:
    report.edits_url = await asyncio.to_thread(save_edits, report, snapshot, store, task, when)


def save_edits(
    report: CleanupReport, snapshot: WorkspaceChanges, store: EditStore, task: str, when: float
) -> str:
    """Copy the changed files, the diff and a manifest to the store; returns the folder's URL."""
    folder = edits_folder(task, when)
    changed = snapshot.changed()
    report.changed = list(changed)
    deleted, copied = [], []
    for rel in changed:
        path = snapshot.root / rel
        if not path.is_file():
            deleted.append(rel)
        elif path.stat().st_size > MAX_EDIT_FILE_BYTES:
            report.skipped.append(rel)
        else:
            store.put_file(f"{folder}/files/{Path(rel).as_posix()}", path)
            copied.append(rel)
    patch = snapshot.diff(prefix=git_prefix(snapshot.root)).encode()
    store.put_bytes(f"{folder}/changes.diff", patch)
    store.put_bytes(f"{latest_patch(task)}", patch)
    manifest = _manifest(task, snapshot.root, when, copied, deleted, report.skipped)
    store.put_bytes(f"{folder}/manifest.json", manifest)
    url = store.url_for(folder)
    logger.info("saved %d changed files of %s to %s", len(copied), snapshot.root, url)
    return url


def _manifest(
    task: str, root: Path, when: float, copied: Sequence[str], deleted: Sequence[str],
    skipped: Sequence[str],
) -> bytes:
    record = {
        "task": task,
        "workspace": str(root),
        "saved_at": datetime.fromtimestamp(when, tz=timezone.utc).isoformat(),
        "copied": list(copied),
        "deleted": list(deleted),
        "too_large": list(skipped),
        "max_file_bytes": MAX_EDIT_FILE_BYTES,
    }
    return (json.dumps(record, indent=2) + "\n").encode()


def _final_mail(
    state: SessionState, report: CleanupReport, pod: PodHandle | None, hostname: str | None,
    now: float,
) -> FinalMail:
    from interactive.monitor import describe_pod

    return FinalMail(
        pod=describe_pod(pod, hostname),
        task=state.task,
        idle_since=state.last_activity,
        reaped_at=now,
        edits_url=report.edits_url,
        changed=list(report.changed),
        problems=list(report.problems),
    )


async def _delete(pod: PodHandle, report: CleanupReport) -> bool:
    saved = f"edits saved to {report.edits_url}" if report.edits_url else "edits not saved"
    await asyncio.to_thread(pod.event, "PodcodeReaped", f"idle session cleaned up; {saved}")
    deleted = await asyncio.to_thread(pod.delete)
    if not deleted:
        raise RuntimeError("the Kubernetes API did not delete the pod (see the log above)")
    return True
