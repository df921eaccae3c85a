"""The one task-name-to-folder function: every folder named after a task (inputs,
checkpoints, cached outputs, saved edits, the rerun script) uses it, so one task has one
name on disk.
"""

from __future__ import annotations

import hashlib
import re

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


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
