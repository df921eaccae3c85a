"""Whether this process is one of Ray's workers (read from Ray itself, never imported here)."""

from __future__ import annotations

import sys


def in_worker() -> bool:
    """Whether this process is a Ray worker running a task or an actor (not a driver)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    from ray._private.worker import WORKER_MODE, global_worker

    return bool(global_worker.mode == WORKER_MODE)
