"""A task's name, and the one task-name-to-folder function.

A task is named by where it lives: ``module.qualname`` for a module that can be
imported, and ``path/to/script.py:qualname`` for a script (module ``__main__``), the
path relative to the workspace. Every folder named after a task (inputs, checkpoints,
cached outputs, saved edits, the rerun script) goes through :func:`folder_name`, so one
task has one name on disk.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
RAW_ATTRIBUTE = "__podcode_task__"
"""The decorator stores the undecorated function under this attribute."""


def folder_name(task: str) -> str:
    """A file-name-safe, collision-free folder name for ``task``.

    A name that is already safe is kept as it is (``train.fit``); any other gets the
    unsafe characters replaced and a short hash of the original, so that two tasks never
    share a folder (``mod.<locals>.f`` → ``mod._locals_.f-1a2b3c4d``). The result is one
    path component: never empty, never ``.`` or ``..``, no ``/``.
    """
    safe = _SAFE.sub("_", task).strip(".") or "_"
    if safe == task:
        return safe
    return f"{safe}-{hashlib.blake2b(task.encode(), digest_size=4).hexdigest()}"


def task_matches(name: str | None, given: str) -> bool:
    """Whether ``given`` names the task ``name``: its full name, or a tail of it after a
    dot or a script's colon (``train`` for ``jobs/run.py:train``; ``fit`` and ``train.fit``
    for ``pkg.train.fit``). The one rule for ``--task`` and ``podcode edits``."""
    name = name or ""
    return name == given or name.endswith((f".{given}", f":{given}"))


def task_name(
    module: str, qualname: str, source: str | None, base: Path, spec_name: str | None = None
) -> str:
    """The name of the task ``module.qualname`` defined in the file ``source``.

    A script (``__main__``) is named by its path relative to ``base`` (the workspace,
    else the working folder), ``jobs/train.py:train``; outside ``base``, by its absolute
    path. ``python -m pkg.mod`` runs ``__main__`` too, but is named ``pkg.mod.train``
    from ``spec_name`` (``__main__.__spec__.name``).
    """
    if module != "__main__":
        return f"{module}.{qualname}"
    if spec_name and spec_name != "__main__":
        return f"{spec_name}.{qualname}"
    if not source:
        return f"__main__.{qualname}"  # an interactive session: nowhere to name it by
    path = Path(os.path.abspath(source))
    try:
        where = path.relative_to(os.path.abspath(base)).as_posix()
    except ValueError:
        where = path.as_posix()
    return f"{where}:{qualname}"
