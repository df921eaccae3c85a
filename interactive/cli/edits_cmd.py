"""``podcode edits TASK``: the last fix saved for a task, as a patch, straight from the store.

Works on the laptop after the pod is gone, as long as ``PODCODE_STORE`` points at the
store the pod used (a bucket); ``podcode edits TASK | git apply`` applies it.
"""

from __future__ import annotations

import argparse
import sys

from interactive.cli.console import Console
from interactive.cli.errors import CliError, Exit


def run(args: argparse.Namespace, console: Console) -> int:
    from interactive.storage.edits import latest_patch
    from interactive.storage.store import open_store

    store = open_store()
    patch = store.get_bytes(latest_patch(args.task))
    if patch is None:
        raise CliError(
            f"no fix of {args.task} is saved in {store.url} (the task name as podcode prints "
            "it, e.g. features.normalize; set PODCODE_STORE to the store the pod used)",
            Exit.NOT_FOUND,
        )
    sys.stdout.buffer.write(patch)
    sys.stdout.flush()
    return 0
