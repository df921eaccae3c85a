"""Activity samplers: files in the workspace, CPU of the user's processes, GPU use.

GPU use lives in :mod:`interactive.reaper.gpu`; :class:`GpuSampler` and
:func:`visible_gpus` are re-exported here.

Each sampler answers ``sample(now) -> Sample`` and never raises for an
ordinary condition (a process that vanished, no GPU). The first reading of a
sampler is its baseline and never counts as activity. Samplers are blocking
and cheap; the monitor runs them on its own thread.

What is *not* activity: an open but untouched browser tab (code-server's
heartbeat file is touched as long as any tab is open, so it is never read,
even when the workspace contains it), what podcode and code-server write
themselves (podcode's log file when stdout or stderr goes to a file in the
workspace, ``$PODCODE_HOME``, code-server's data folder), podcode's own
threads, debugpy's threads and code-server's own processes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from interactive.base.settings import podcode_home
from interactive.base.threads import own_native_ids
from interactive.base.types import Environ
from interactive.reaper.gpu import GpuSampler, visible_gpus
from interactive.reaper.idle import Sample
from interactive.reaper.proctree import (
    RESCAN_SECONDS,
    Proc,
    TreeReader,
    children_map,
    descendants,
    read_table,
)
from interactive.storage.workspace import SKIP_DIRS, SKIP_PATHS
from server_bootstrap.codeserver import data_folder

logger = logging.getLogger(__name__)

__all__ = ["CpuSampler", "FileSampler", "GpuSampler", "Sampler", "own_writes", "visible_gpus"]

MAX_FILES = 20000
"""Files stamped per workspace scan; a larger tree is watched in part (logged once)."""
OWN_THREAD_PREFIXES = ("pydevd",)
"""Python threads (by name) whose CPU is debugpy's, never the user's; podcode's own threads
are known without names (:func:`interactive.base.threads.own_native_ids`)."""
EXCLUDE_REFRESH_SECONDS = 60.0
"""How often the files podcode writes itself are looked up again (a log file handler added
later, or stdout sent elsewhere); every logger is visited for it."""
SCOPES = ("user", "tree")
BIRTH_SLACK_SECONDS = 2.0
"""A process's start time as psutil computes it can read up to a second early (the
kernel's boot time is in whole seconds): one born since the last reading may look older."""


class Sampler(Protocol):
    """One source of activity."""

    def sample(self, now: float) -> Sample: ...


# -- workspace files -------------------------------------------------------------


def own_writes(environ: Environ | None = None) -> list[Path]:
    """Files and folders that podcode and code-server write by themselves, never the user.

    The files this process's stdout and stderr go to (``python job.py > run.log
    2>&1``: podcode's own log lines land there while the session waits) and those
    of its logging file handlers; ``$PODCODE_HOME`` (session records, code-server's
    user data); code-server's data folder (its heartbeat file, touched while any
    tab is open, and its logs), which is inside the workspace when the workspace
    contains ``$HOME``.
    """
    environ = os.environ if environ is None else environ
    found = [podcode_home(environ), data_folder(environ)]
    for fd in (1, 2):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.startswith("/dev/"):
            found.append(Path(target.removesuffix(" (deleted)")))
    for logger_ in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger_, "handlers", ()):
            if isinstance(handler, logging.FileHandler):
                found.append(Path(handler.baseFilename))
    return found


def _relative_to(root: str, paths: Iterable[Path]) -> set[str]:
    """The ``paths`` that lie inside ``root``, relative to it (real paths compared)."""
    inside = set()
    for path in paths:
        relative = os.path.relpath(os.path.realpath(path), root)
        if relative != "." and not relative.startswith(".." + os.sep) and relative != "..":
            inside.add(relative)
    return inside


@dataclass
class FileSampler:
    """Active when any file under ``root`` was added, changed or removed since last time.

    Stat-based and bounded: tool folders (``.git``, ``node_modules``,
    ``__pycache__``...) are skipped, symbolic links are not followed and at most
    ``max_files`` files are looked at. Keeps one number per scan, not a list.
    What ``exclude()`` names (files or folders; by default :func:`own_writes`) and
    podcode's own files in ``.vscode`` are never looked at.
    """

    root: Path
    max_files: int = MAX_FILES
    skip: frozenset[str] = SKIP_DIRS
    exclude: Callable[[], Iterable[Path]] = own_writes
    _signature: int | None = field(default=None, init=False)
    _warned: bool = field(default=False, init=False)
    _excluded: frozenset[str] = field(default=frozenset(), init=False)
    _excluded_at: float | None = field(default=None, init=False)

    def sample(self, now: float) -> Sample:
        if self._excluded_at is None or not 0 <= now - self._excluded_at < EXCLUDE_REFRESH_SECONDS:
            real_root = os.path.realpath(self.root)
            self._excluded = frozenset(_relative_to(real_root, self.exclude())) | SKIP_PATHS
            self._excluded_at = now
        signature, count = self._scan()
        changed = self._signature is not None and signature != self._signature
        self._signature = signature
        return Sample("files", changed, float(count), "workspace files changed" if changed else "")

    def _scan(self) -> tuple[int, int]:
        signature = count = 0
        for rel, stat in self._files():
            signature ^= hash((rel, stat.st_mtime_ns, stat.st_size))
            count += 1
        return signature, count

    def _files(self) -> Iterator[tuple[str, os.stat_result]]:
        count = 0
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            try:
                entries = list(os.scandir(os.path.join(self.root, rel_dir)))
            except OSError:
                continue
            for entry in entries:
                rel = os.path.join(rel_dir, entry.name)
                if rel in self._excluded:
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in self.skip:
                            stack.append(rel)
                        continue
                    stat = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                count += 1
                if count > self.max_files:
                    self._warn_bounded()
                    return
                yield rel, stat

    def _warn_bounded(self) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "workspace %s has over %d files; only the first %d are watched for changes",
                self.root, self.max_files, self.max_files,
            )


# -- CPU of the user's processes -------------------------------------------------


Key = tuple[str, int, float]
"""("proc", pid, create_time), ("thread", tid, 0) or ("children", pid, 0)."""


@dataclass
class CpuSampler:
    """Active when the user's processes used more than ``idle_percent`` of one CPU.

    Counted: this process's threads except podcode's own (started by
    :mod:`interactive.base.threads`), debugpy's (named ``pydevd*``) and the sampling
    thread; its finished children;
    and other processes: every process of the same user (``scope="user"``, for a
    pod, where that is the task's container) or only this process's descendants
    (``scope="tree"``, on a shared machine). Not counted: code-server's own
    processes, the descendants of ``ide_pids()`` that run code-server's own
    executable. A shell, a debug re-run or a training run started from the
    IDE's terminal runs another executable and counts.
    """

    idle_percent: float
    ide_pids: Callable[[], Sequence[int]] = tuple
    scope: str = "user"
    own_pid: int = field(default_factory=os.getpid)
    own_thread_prefixes: tuple[str, ...] = OWN_THREAD_PREFIXES
    """Threads of this process whose name starts so are never the user's work."""
    _last: dict[Key, float] | None = field(default=None, init=False)
    _last_now: float = field(default=0.0, init=False)
    _last_wall: float = field(default=0.0, init=False)
    _exes: dict[tuple[int, float], str | None] = field(default_factory=dict, init=False)
    rescan_seconds: float = RESCAN_SECONDS
    """While processes start elsewhere, how often the process table is read whole: a
    process that joins the tree is found within this (its CPU time counted from its start)."""
    _tree: TreeReader = field(init=False)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"CpuSampler scope {self.scope!r}: expected one of {SCOPES}")
        self._tree = TreeReader(rescan_seconds=self.rescan_seconds)

    def sample(self, now: float) -> Sample:
        wall = time.time()
        used = self.measure(now)
        previous, self._last = self._last, used
        previous_now, self._last_now = self._last_now, now
        previous_wall, self._last_wall = self._last_wall, wall
        if previous is None or now <= previous_now:
            return Sample("cpu", False, None, "")
        # A process first seen now may have started any time since the tree was last read
        # whole: before that, it would have been seen.
        unseen_since = min(previous_wall, self._tree.previous_whole_at)
        seconds = sum(_delta(key, cpu, previous, unseen_since) for key, cpu in used.items())
        percent = 100.0 * seconds / (now - previous_now)
        active = percent > self.idle_percent
        return Sample("cpu", active, percent, f"CPU {percent:.1f}%" if active else "")

    def measure(self, now: float | None = None) -> dict[Key, float]:
        """CPU seconds used so far by everything that counts, per thread or process
        (``now``: the monitor's clock, which paces whole readings of the process table)."""
        now = time.monotonic() if now is None else now
        used = self._own_threads()
        ended = os.times()  # children that ended and were waited for
        used[("children", self.own_pid, 0.0)] = ended.children_user + ended.children_system
        roots = list(self.ide_pids())
        table = (self._tree.read([self.own_pid, *roots], now) if self.scope == "tree"
                 else read_table())
        children = children_map(table)
        excluded = self._ide_processes(roots, table, children) | {self.own_pid}
        for pid in self._candidates(table, children):
            proc = table.get(pid)
            if proc is not None and pid not in excluded:
                used[("proc", pid, proc.started)] = proc.cpu_seconds
        return used

    def _own_threads(self) -> dict[Key, float]:
        own = own_native_ids() | {
            thread.native_id
            for thread in threading.enumerate()
            if thread.name.startswith(self.own_thread_prefixes)
        }
        own.add(threading.get_native_id())
        try:
            threads = psutil.Process(self.own_pid).threads()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return {}
        return {
            ("thread", t.id, 0.0): t.user_time + t.system_time for t in threads if t.id not in own
        }

    def _candidates(self, table: Mapping[int, Proc], children: Mapping[int, list[int]]
                    ) -> list[int]:
        if self.scope == "tree":
            return descendants([self.own_pid], children)
        uid = os.getuid()
        return [proc.pid for proc in table.values() if proc.uid == uid]

    def _ide_processes(self, roots: Sequence[int], table: Mapping[int, Proc],
                       children: Mapping[int, list[int]]) -> set[int]:
        """code-server's own processes: its launcher, and those of its tree on its executable.

        ``ide_pids()`` names the launcher, or more of the tree; the tree is everything
        below them, terminals and what runs in them included. Only the processes running
        the launcher's executable (code-server's node) are code-server's own.
        """
        tree = [pid for pid in roots if pid in table]
        tree += descendants(tree, children)
        alive = {(pid, table[pid].started) for pid in tree}
        self._exes = {key: exe for key, exe in self._exes.items() if key in alive}
        if not tree:
            return set()
        launcher = min(tree, key=lambda pid: (table[pid].started, pid))
        exe = self._exe(table[launcher])
        if exe is None:
            return {launcher}
        return {launcher} | {pid for pid in tree if self._exe(table[pid]) == exe}

    def _exe(self, proc: Proc) -> str | None:
        """The executable a process runs, remembered per process (by pid and start)."""
        key = (proc.pid, proc.started)
        if key not in self._exes:
            try:
                self._exes[key] = os.readlink(f"/proc/{proc.pid}/exe").removesuffix(" (deleted)")
            except OSError:
                self._exes[key] = None
        return self._exes[key]


def _delta(key: Key, cpu: float, previous: dict[Key, float], unseen_since: float) -> float:
    """CPU seconds since the last reading; a thread, or a process born since ``unseen_since``
    (wall clock), counts from its start."""
    if key in previous:
        return max(0.0, cpu - previous[key])
    if key[0] == "thread" or (key[0] == "proc" and key[2] >= unseen_since - BIRTH_SLACK_SECONDS):
        return cpu
    return 0.0
