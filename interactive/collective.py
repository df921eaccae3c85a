"""torch.distributed around a debug session: break the group on failure, re-form it on resume.

When one rank fails, the others soon block in a collective that waits for it
(for 30 minutes by default, on GPUs). So before the failed rank's session
opens, podcode aborts the default process group: the peers' pending
collectives fail at once ("connection closed by peer"), and each peer opens
its own session at the collective it was in. On resume, every rank re-forms
the group with the same backend, rank and world size, under a fresh store
prefix, then runs its task again.

torch is never imported here: only a process that already uses
``torch.distributed`` is touched.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

REFORM_TIMEOUT = datetime.timedelta(minutes=10)
"""How long the re-formed group waits for every rank to resume."""


@dataclass
class _Aborted:
    backend: str
    rank: int
    world_size: int


_aborted: _Aborted | None = None
_generation = 0


def _dist() -> Any:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def abort_group() -> bool:
    """Abort the default process group so peers blocked on this rank fail fast."""
    global _aborted
    dist = _dist()
    if dist is None or dist.get_world_size() < 2:
        return False
    aborted = _Aborted(str(dist.get_backend()), dist.get_rank(), dist.get_world_size())
    try:
        dist.distributed_c10d._abort_process_group()
    except Exception:  # older torch: no abort; destroying closes the connections too
        log.debug("abort of the process group failed; destroying it", exc_info=True)
        try:
            dist.destroy_process_group()
        except Exception:
            log.exception("could not break the process group; peers wait for its timeout")
            return False
    _aborted = aborted
    log.warning(
        "rank %d: process group (%s, %d ranks) aborted so the other ranks stop waiting on "
        "this one; it is re-formed when the session resumes",
        aborted.rank,
        aborted.backend,
        aborted.world_size,
    )
    return True


def reform_group() -> bool:
    """Re-create the group this process aborted (blocks until every rank joins)."""
    global _aborted, _generation
    if _aborted is None:
        return False
    import torch.distributed as dist
    from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]

    if dist.is_initialized():  # the resumed code made one itself
        _aborted = None
        return False
    _generation += 1
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    # Under torchrun the agent hosts the store; otherwise rank 0 hosted it with the group.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    is_master = _aborted.rank == 0 and not agent_store
    store = TCPStore(host, port, is_master=is_master, timeout=REFORM_TIMEOUT)
    log.info(
        "rank %d: re-forming the process group (%s, generation %d%s)",
        _aborted.rank,
        _aborted.backend,
        _generation,
        ", hosting the store" if is_master else "",
    )
    dist.init_process_group(
        _aborted.backend,
        store=PrefixStore(f"podcode/reform-{_generation}/", store),
        rank=_aborted.rank,
        world_size=_aborted.world_size,
        timeout=REFORM_TIMEOUT,
    )
    _aborted = None
    return True
