"""Which kind of store a URL names, opened: the one module that knows every backend (the
backends import :mod:`interactive.storage.store`, never the other way)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from interactive.storage.fsspec_store import FsspecStore, remote_fs
from interactive.storage.local_store import LocalStore
from interactive.storage.store import Store, local_root, store_url

log = logging.getLogger(__name__)


def open_store(environ: Mapping[str, str] | None = None) -> Store:
    """Open the store named by ``PODCODE_STORE`` (default ``$PODCODE_HOME/store``)."""
    url = store_url(environ)
    root = local_root(url)
    if root is not None:
        return LocalStore(root)
    return FsspecStore(url.rstrip("/"), remote_fs(url))


def open_store_or_none() -> Store | None:
    """:func:`open_store`, or None (logged) when it cannot be opened: a cleanup goes on
    without saving the edits."""
    try:
        return open_store()
    except Exception:
        log.exception("the store cannot be opened; the edits cannot be saved")
        return None
