"""Ray Train's workers on the bug board: ranks of one process group, failing and resuming
together.

A ``TorchTrainer``'s workers are the ranks of one ``torch.distributed`` group. They go
through the job's board (:mod:`interactive.ray.bugs`) as other tasks do, with three
differences:

- a rank whose bug opens the session names its group on the board (``broke``) before
  the session breaks the group;
- a rank that failed only because the group broke under it ("Connection closed by
  peer", in DDP's all-reduce say) has no bug of its own: it waits on the bug of the rank
  that broke the group, and says where it was stopped;
- every rank that waits breaks its own side of the group (its peers must not wait on it)
  and, once the session resumes, re-forms the group with the others before calling the
  task again; the session posts its outcome at every resume, fixed or not, since the
  group can only run again whole.

What is done to the group comes from the task layer (:class:`Ranks`): this layer does not
import ``torch``.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from interactive.base.types import ExcInfo

log = logging.getLogger(__name__)

CULPRIT_SECONDS = 5.0
"""How long a stopped rank looks on the board for the bug that broke its group (the
failing rank names it before it breaks the group; a loaded cluster delays the message)."""
CULPRIT_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Ranks:
    """A failed task that is one rank of a process group, and what the task layer does to
    that group."""

    group: str
    """The group's name on the board: its store's address, the same on every rank."""
    abort: Callable[[BaseException], object]
    """Break this rank's side of the group (its peers' collectives with it fail now)."""
    reform: Callable[[], object]
    """Form the group again with the other ranks (blocks until every rank joins)."""
    broken: Callable[[BaseException], bool]
    """Whether an error is what a collective raises when a peer broke the group."""
    waiting: Callable[[bool], object]
    """This rank waits on the board (True) or no longer (False): its peers are not told
    that it is stopped in a collective."""


def group_name(environ: Mapping[str, str] | None = None) -> str:
    """The group's name: ``MASTER_ADDR:MASTER_PORT``, which Ray Train sets on every worker
    of one run (its rank 0's address); the job's where it is not set."""
    environ = os.environ if environ is None else environ
    where = [environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")]
    return ":".join(part for part in where if part) or "job"


def bug_of(ranks: Ranks, shared: Any, key: str, excinfo: ExcInfo) -> str:
    """The bug this rank waits on: its own (``key``), or, stopped by the group breaking,
    the bug of the rank that broke it (found on the board ``shared``). A stopped rank
    breaks its side of the group and says where it was stopped."""
    error = excinfo[1]
    if not ranks.broken(error):
        return key
    ranks.abort(error)  # the message now names the rank that failed, where it is known
    culprit = _culprit(shared, ranks.group)
    if culprit is None:
        log.warning("no bug on the board broke the group %s: a session of this rank's own",
                    ranks.group)
        return key
    why = str(error).split("; here: ")[0]  # the peer's failure, where it is known
    print(f"podcode: this rank was stopped at {stopped_at(excinfo)}: {why[:300]}; it waits "
          f"for the session of that bug ({culprit}) and runs again with its fix", flush=True)
    return culprit


def _culprit(shared: Any, group: str) -> str | None:
    import ray

    deadline = time.monotonic() + CULPRIT_SECONDS
    while True:
        found: str | None = ray.get(shared.breaker.remote(group))
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(CULPRIT_POLL_SECONDS)


def stopped_at(excinfo: ExcInfo) -> str:
    """Where the task was when it was stopped: its innermost frame outside the libraries
    (``train_epoch (torch_linear_example.py:52): loss.backward()``)."""
    frames = traceback.extract_tb(excinfo[2])
    own = [frame for frame in frames if "site-packages" not in frame.filename]
    if not frames:
        return "an unknown place"
    frame = (own or frames)[-1]
    line = f": {frame.line.strip()}" if frame.line else ""
    return f"{frame.name} ({os.path.basename(frame.filename)}:{frame.lineno}){line}"
