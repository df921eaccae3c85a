"""A task running in a Ray worker: which copy of the code it runs, and where the IDE opens.

With ``runtime_env={"working_dir": ...}`` each node unpacks the job's files into a
folder of its own and starts its workers there: modules the task imports come from that
copy. A function of the driver's script is shipped by value (cloudpickle): its code
names the driver's file (or ``<dynamic-code>``), which on another machine does not
exist. Both are brought to one place: the copy (also for a Ray Tune trial, whose worker
runs in a folder of the trial's). The IDE opens the copy, the by-value
code is told it lives there (tracebacks, the debugger and resume all see the copy's
file), and the edits are saved to the store from there, as for any session.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from interactive.base import identity
from interactive.base.rayworker import in_worker as in_worker  # re-exported
from interactive.base.settings import Settings
from interactive.base.types import TaskRef
from interactive.resume.patching import shipped, unwrap

log = logging.getLogger(__name__)

DYNAMIC = "<dynamic-code>"
"""The file name cloudpickle 3.1.3 gives code it ships by value."""

COPIES = "working_dir_files"
"""The folder of Ray's runtime environments that holds the nodes' copies of working_dirs."""


def working_dir() -> Path | None:
    """The node's copy of the job's ``working_dir``, if any (see :func:`copy_of`)."""
    import ray

    if not ray.get_runtime_context().runtime_env.get("working_dir"):
        return None
    return copy_of(Path.cwd(), sys.path, os.environ.get("TUNE_ORIG_WORKING_DIR"))


def copy_of(cwd: Path, paths: Iterable[str], before_trial: str | None) -> Path:
    """Where the node unpacked the job's ``working_dir``. A worker starts there, and Ray
    puts the folder on its ``sys.path``; but Ray Tune (and Ray Train) move a trial's
    worker into a folder of the trial's own, holding its results and not the code, and
    say where it was in ``TUNE_ORIG_WORKING_DIR``. The first of the working directory,
    that variable and ``sys.path`` that is one of Ray's copies wins; else the variable's
    folder, else the working directory."""
    for candidate in (str(cwd), before_trial, *paths):
        if candidate and Path(candidate).parent.name == COPIES and os.path.isdir(candidate):
            return Path(candidate)
    if before_trial and os.path.isdir(before_trial):
        return Path(before_trial)
    return cwd


def adapt(fn: Any, ref: TaskRef, settings: Settings) -> tuple[TaskRef, Settings]:
    """The task as a Ray worker runs it: the IDE opens the ``working_dir`` copy and the
    task's by-value code names its file there."""
    if not in_worker():
        return ref, settings
    identity.share_pod("a Ray node: its raylet and other workers")  # never deleted
    root = working_dir()
    if root is None:
        return ref, settings
    source = relocate(fn, root)
    if source is not None:
        ref = replace(ref, source=str(source))
    if settings.workspace is None:
        settings = replace(settings, workspace=root)
    return ref, settings


def in_copy(filename: str, root: Path) -> Path | None:
    """The copy's file for ``filename`` of the driver's machine: the longest tail of its
    path that exists under ``root`` (``jobs/train.py`` before ``train.py``)."""
    parts = Path(filename).parts
    for start in range(1, len(parts)):
        candidate = root.joinpath(*parts[start:])
        if candidate.is_file():
            return candidate
    return None


def relocate(task: Any, root: Path) -> Path | None:
    """Point the by-value code of ``task`` (and of the functions shipped with it) at the
    copy's file; that file (None: the task is not by value, or its file is not there)."""
    for function in unwrap(task):
        if not shipped(function):
            continue  # imported by reference: already the copy's module
        namespace = function.__globals__
        origin = str(namespace.get("__file__") or function.__code__.co_filename)
        if Path(origin).is_relative_to(root):
            return Path(origin)  # the copy's file already (moved at an earlier call): no I/O
        target = in_copy(origin, root) if origin != DYNAMIC else None
        if target is None:
            continue
        if Path(origin).resolve() == target.resolve():
            return target
        moved = _point_at(namespace, function, {origin, DYNAMIC}, str(target))
        namespace["__file__"] = str(target)
        log.info("shipped by value from %s: %s run as %s", origin, moved, target)
        return target
    return None


def _point_at(
    namespace: dict[str, Any], task: types.FunctionType, old: set[str], new: str
) -> int:
    """Give the task and the functions in its globals the file ``new``; how many."""
    functions = [task, *(v for v in namespace.values() if isinstance(v, types.FunctionType))]
    for cls in (v for v in namespace.values() if isinstance(v, type)):
        functions.extend(f for v in vars(cls).values() for f in unwrap(v))
    moved = {id(f): f for f in functions if f.__code__.co_filename in old}
    for function in moved.values():
        function.__code__ = _renamed(function.__code__, old, new)
    return len(moved)


def _renamed(code: types.CodeType, old: set[str], new: str) -> types.CodeType:
    consts = tuple(
        _renamed(c, old, new) if isinstance(c, types.CodeType) else c for c in code.co_consts
    )
    filename = new if code.co_filename in old else code.co_filename
    return code.replace(co_filename=filename, co_consts=consts)
