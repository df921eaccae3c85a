"""``podcode edits TASK``: the last fix saved for a task, as a patch, straight from the store.

Works on the laptop after the pod is gone, as long as ``PODCODE_STORE`` points at the
store the pod used (a bucket); ``podcode edits TASK | git apply`` applies it. ``TASK`` is
matched as ``--task`` is everywhere (:func:`interactive.base.names.task_matches`): its full
name or its last part, ``compute`` for ``job.py:compute``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from interactive.base.names import task_matches
from interactive.cli.errors import CliError, Exit
from interactive.cli.terminal import Console

if TYPE_CHECKING:
    from interactive.storage.store import Store

MANIFEST = "manifest.json"
"""Each saved fix's manifest (``edits/<task>/<time>/manifest.json``) names its task."""


def run(args: argparse.Namespace, console: Console) -> int:
    from interactive.storage.backends import open_store
    from interactive.storage.edits import latest_patch

    store = open_store()
    patch = store.get_bytes(latest_patch(args.task))
    if patch is None:
        task = matching_task(store, args.task)
        patch = store.get_bytes(latest_patch(task))
        if patch is None:  # removed between the listing and the read
            raise CliError(f"the fix of {task} in {store.url} was removed", Exit.NOT_FOUND)
    sys.stdout.buffer.write(patch)
    sys.stdout.flush()
    return 0


def saved_tasks(store: Store) -> list[str]:
    """The tasks with a fix saved in ``store``, read from one manifest of each."""
    from interactive.storage.edits import EDITS

    newest: dict[str, str] = {}
    for path in store.list_files(EDITS):
        folder, _, rest = path.partition("/")
        if rest.endswith(f"/{MANIFEST}") and rest > newest.get(folder, ""):
            newest[folder] = rest
    tasks = []
    for folder, rest in sorted(newest.items()):
        raw = store.get_bytes(f"{EDITS}/{folder}/{rest}")
        task = _task_of(raw)
        if task is not None:
            tasks.append(task)
    return tasks


def _task_of(raw: bytes | None) -> str | None:
    try:
        task = json.loads(raw or b"").get("task")
    except (ValueError, AttributeError):
        return None
    return task if isinstance(task, str) else None


def matching_task(store: Store, given: str) -> str:
    """The one task with a saved fix that ``given`` names; else the error that lists them."""
    tasks = saved_tasks(store)
    found = [task for task in tasks if task_matches(task, given)]
    if len(found) == 1:
        return found[0]
    if found:
        raise CliError(f"{len(found)} tasks with a saved fix match {given} in {store.url}: "
                       f"name one in full ({', '.join(found)})", Exit.USAGE)
    saved = f"fixes saved there: {', '.join(tasks)}" if tasks else "no fix is saved there"
    raise CliError(
        f"no fix of {given} is saved in {store.url} ({saved}). Name the task as podcode "
        "prints it, or its last part (compute for job.py:compute); set PODCODE_STORE to "
        "the store the pod used", Exit.NOT_FOUND,
    )
