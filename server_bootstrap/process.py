"""Stop a whole process tree: the group, the descendants, and anything carrying a marker.

A server's launcher starts children (code-server's file watcher, extension host,
pty host, terminal shells; JupyterLab's kernels and terminals) that outlive a plain
kill of the launcher, and terminal shells get sessions of their own. Members are found
three ways: the process group, the launcher's descendants, and an environment marker
every descendant inherits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

import psutil

log = logging.getLogger(__name__)


def tree_members(
    pgid: int | None, root: int | None, marker: tuple[str, str] | None
) -> list[psutil.Process]:
    """Live processes of the tree, excluding this process."""
    found: dict[int, psutil.Process] = {}
    if root is not None:
        try:
            proc = psutil.Process(root)
            for member in [proc, *proc.children(recursive=True)]:
                found[member.pid] = member
        except psutil.Error:
            pass
    if pgid is not None or marker is not None:  # every process read: only when asked
        for proc in psutil.process_iter():
            if proc.pid in found or proc.pid == os.getpid():
                continue
            if _in_group(proc, pgid) or _has_marker(proc, marker):
                found[proc.pid] = proc
    return [proc for proc in found.values() if _alive(proc)]


def _in_group(proc: psutil.Process, pgid: int | None) -> bool:
    if pgid is None:
        return False
    try:
        return os.getpgid(proc.pid) == pgid
    except OSError:
        return False


def _has_marker(proc: psutil.Process, marker: tuple[str, str] | None) -> bool:
    if marker is None:
        return False
    try:
        return bool(proc.environ().get(marker[0]) == marker[1])
    except psutil.Error:
        return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def signal_all(procs: list[psutil.Process], pgid: int | None, signum: int) -> None:
    """Send ``signum`` to the group and to each process (gone ones are skipped)."""
    if pgid is not None and pgid != os.getpgid(0):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signum)


def terminate_tree(
    pgid: int | None,
    root: int | None,
    marker: tuple[str, str] | None,
    *,
    grace_seconds: float = 5.0,
    skip_wait: int | None = None,
) -> list[psutil.Process]:
    """SIGTERM the tree, SIGKILL what is left after ``grace_seconds``; return survivors.

    ``skip_wait`` is a pid this process must reap itself (its own child): it is
    signalled but not waited for here, so its exit status is not stolen.
    """
    procs = tree_members(pgid, root, marker)
    signal_all(procs, pgid, signal.SIGTERM)
    waited = [proc for proc in procs if proc.pid != skip_wait]
    _, alive = psutil.wait_procs(waited, timeout=grace_seconds)
    if alive:
        log.info("%d processes of the tree ignored SIGTERM; killing them", len(alive))
    for _ in range(3):
        left = tree_members(pgid, root, marker)
        if not left:
            break
        signal_all(left, pgid, signal.SIGKILL)
        psutil.wait_procs([p for p in left if p.pid != skip_wait], timeout=grace_seconds)
    return [p for p in tree_members(pgid, None, marker) if p.pid != skip_wait]


async def stop_child_tree(
    proc: asyncio.subprocess.Process, marker: tuple[str, str] | None, grace_seconds: float
) -> list[psutil.Process]:
    """End ``proc`` (a child of this process, in a session of its own) and its tree:
    SIGTERM, SIGKILL after ``grace_seconds``; ``proc`` reaped here. The survivors."""
    survivors = await asyncio.to_thread(terminate_tree, proc.pid, proc.pid, marker,
                                        grace_seconds=grace_seconds, skip_wait=proc.pid)
    try:
        await asyncio.wait_for(proc.wait(), timeout=grace_seconds)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    return survivors
