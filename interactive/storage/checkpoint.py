"""Per-task checkpoint folders in the store, and atomic writes into them.

``checkpoint_dir()`` is ``checkpoints/<task>/`` in the store. With a local store
it is that folder itself. With a remote store (``s3://``...) it is a local
mirror under ``$PODCODE_HOME/mirror/``: filled from the store the first time a
process asks for it, and uploaded by :func:`sync_checkpoints` (which podcode
calls after the preemption and cleanup hooks and when the task returns or
fails).

Write checkpoints with :func:`atomic_write` (a file object) or
:func:`atomic_path` (a temporary path for libraries that want a file name): the
data goes to a temporary ``*.partial`` file next to the target and is moved
over it with ``os.replace`` only once complete, so a reader (a retry, a new
pod) never takes a half-written checkpoint for a whole one.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from interactive.base import files
from interactive.base.context import current_task
from interactive.base.errors import PodcodeError
from interactive.base.names import folder_name
from interactive.base.settings import podcode_home
from interactive.storage.backends import open_store
from interactive.storage.store import Store

logger = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
"""Top folder of checkpoints in the store."""

_synced_down: dict[Path, tuple[Store, str]] = {}
"""Mirror folders already filled from the store in this process: their store and task."""
_lock = threading.Lock()


class NoTaskError(PodcodeError):
    """``checkpoint_dir()`` was called outside a decorated task and without a task name."""


def resolve_task(task: str | None = None) -> str:
    """The explicit ``task``, else the decorated task now running, else an error."""
    name = task or current_task.get()
    if not name:
        raise NoTaskError(
            "checkpoint_dir() needs a task: call it inside a function decorated with "
            "@vscode, or name one: checkpoint_dir('my_module.train')"
        )
    return name


def store_dir(task: str) -> str:
    """The task's checkpoint folder, relative to the store's root."""
    return f"{CHECKPOINTS}/{folder_name(task)}"


def mirror_dir(store: Store, task: str, environ: Mapping[str, str] | None = None) -> Path:
    """The local copy of a remote store's checkpoint folder."""
    url_id = hashlib.blake2b(store.url.encode(), digest_size=8).hexdigest()
    return podcode_home(environ) / "mirror" / url_id / CHECKPOINTS / folder_name(task)


def checkpoint_dir(
    task: str | None = None,
    *,
    store: Store | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """A local folder for the task's checkpoints that survives the pod.

    ``task`` defaults to the decorated task now running. With a remote store the
    folder is a mirror, filled from the store on the first call in a process.
    """
    name = resolve_task(task)
    store = open_store(environ) if store is None else store
    if store.is_local:
        store.make_dir(store_dir(name))
        return store.local_path(store_dir(name))
    folder = mirror_dir(store, name, environ)
    with _lock:
        if folder not in _synced_down:
            store.sync_down(store_dir(name), folder)
            if not _synced_down:
                atexit.register(sync_all_mirrors)
            _synced_down[folder] = (store, name)
            logger.info("checkpoints of %s fetched from %s", name, store.url_for(store_dir(name)))
    return folder


def sync_checkpoints(
    task: str | None = None,
    *,
    store: Store | None = None,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Upload the task's checkpoint mirror to a remote store; True if something was synced.

    Nothing to do with a local store (the folder is in the store) or when the
    task never asked for its checkpoint folder in this process.
    """
    name = resolve_task(task)
    store = open_store(environ) if store is None else store
    if store.is_local:
        return False
    folder = mirror_dir(store, name, environ)
    if not folder.is_dir():
        return False
    store.sync_up(folder, store_dir(name))
    logger.info("checkpoints of %s saved to %s", name, store.url_for(store_dir(name)))
    return True


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Write a whole file or nothing: ``with atomic_write(dir / "state.pt") as f: save(f)``.

    The target is replaced only when the block finishes without an exception.
    ``mode`` is ``"wb"`` (bytes) or ``"w"`` (text).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with files.atomic_open(target, mode) as fh:
        yield fh


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path to write to; it replaces ``path`` when the block succeeds.

    For libraries that take a file name: ``with atomic_path(p) as tmp:
    torch.save(state, tmp)``. The temporary file lies next to ``path`` and ends
    with ``.partial``, so ``glob("*.pt")`` never picks it up.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with files.atomic_path(target) as temp:
        yield temp


def sync_all_mirrors() -> None:
    """Upload every checkpoint mirror of this process (also run at interpreter exit).

    A safety net: podcode syncs a task's folder when the task returns or fails;
    this catches what changed afterwards. Errors are logged, not raised.
    """
    with _lock:
        mirrors = list(_synced_down.items())
    for folder, (store, name) in mirrors:
        try:
            store.sync_up(folder, store_dir(name))
        except Exception:
            logger.exception("could not save the checkpoints of %s to %s", name, store.url)
