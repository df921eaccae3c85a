"""torch.distributed around a debug session: break the group on failure, re-form it on resume.

When one rank fails, the others soon block in a collective that waits for it
(10 minutes by default with NCCL, 30 with gloo). So before the failed rank's
session opens, podcode aborts the default process group, and each peer opens
its own session at the collective it was in when that fails. On resume, every
rank re-forms the group with the same backend, rank and world size, on the old
group's store under a fresh prefix (a new store on ``MASTER_PORT`` would find
the old one still bound), then runs its task again. A group that the task
formed itself (``init_process_group`` inside the decorated function) is left to
the re-run to form again.

A resume reaches the ranks one after another (or one pod after another). No rank
starts its new attempt before every rank has left the failed one: each waits on
the failed group's store until all have resumed. And that store is kept for the
life of the process: a rank whose new attempt already connected to it (rank 0
serves it when no launcher does, and a new group on ``MASTER_PORT`` reuses it)
never sees it close under it.

Before the group breaks, the failing rank records its failure in the group's
store, and a rank whose collective failed because the group broke names it
(:mod:`interactive.distributed.blame`).

How the group is broken depends on its backend:

- gloo: this rank's gloo connections are shut down first
  (:mod:`interactive.distributed.gloo_sockets`): gloo has no working abort, and
  ``DistributedDataParallel`` keeps the group, and so its sockets, alive. Every
  peer's pending or later collective with this rank then fails at once
  ("Connection closed by peer"). Then ``_abort_process_group()`` (else
  ``destroy_process_group()``) forgets the group in this process.
- NCCL: the communicators are aborted (``ncclCommAbort`` through
  ``_abort_process_group()``, or the ``ProcessGroupNCCL`` backend's ``abort()``
  on older torch), never only destroyed: destroying an NCCL group whose
  collectives are pending waits for them, that is for the peers that wait for
  this rank. A peer connected over the network sees its connections drop, and
  its watchdog reports the error; a peer on the same node (NVLink, shared
  memory) may see nothing until its watchdog's timeout. Either way the
  watchdog then handles the error as ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` says:
  :func:`prefer_raised_nccl_errors` sets it to ``2`` (abort the communicator,
  raise the error in the rank's code, where a session opens) instead of
  torchrun's ``1`` or torch's default ``3``, which kill the process.

torch is never imported here: only a process that already uses
``torch.distributed`` is touched.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interactive.base.errors import add_note
from interactive.distributed import blame, gloo_sockets, jobsession, loops

if TYPE_CHECKING:
    from interactive.distributed.peers import Peers

log = logging.getLogger(__name__)

REFORM_TIMEOUT = datetime.timedelta(minutes=10)
"""How long the re-formed group waits for every rank to resume."""
NCCL_ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
RAISE_NCCL_ERRORS = "2"
"""Abort the communicator and raise the error in the rank's code; keep the process."""
TORCHRUN_DEFAULT = "1"
"""What torchrun's agent sets when its own environment does not say (abort, then kill)."""


@dataclass
class _Aborted:
    backend: str
    rank: int
    world_size: int
    store: Any = None
    """The old default group's store: the re-formed group uses it under a new prefix."""
    formed_by_task: bool = False
    """The decorated call formed the group itself: its re-run forms it again."""


_aborted: _Aborted | None = None
_generation = 0
"""How many times this process's ranks resumed together (the same on every rank)."""
_kept_stores: list[Any] = []
"""The stores of the groups broken so far, kept until the process exits (see the module)."""
_group_at_call: bool | None = None
"""Whether a process group existed at the process's first decorated call (None: unknown)."""


def _dist() -> Any:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def prefer_raised_nccl_errors(environ: MutableMapping[str, str] | None = None) -> bool:
    """Ask NCCL's watchdog to raise its errors in the rank instead of killing the process.

    Sets ``TORCH_NCCL_ASYNC_ERROR_HANDLING=2`` when it is unset, or ``1`` under
    torchrun (the value torchrun's agent sets when told nothing). A value the user
    chose otherwise is kept. ProcessGroupNCCL reads it when the group is created:
    this must run before ``init_process_group`` (the decorator calls it). True when
    it set the variable.
    """
    environ = os.environ if environ is None else environ
    current = environ.get(NCCL_ERROR_HANDLING)
    under_torchrun = "TORCHELASTIC_RUN_ID" in environ
    if current is not None and not (under_torchrun and current == TORCHRUN_DEFAULT):
        return False
    environ[NCCL_ERROR_HANDLING] = RAISE_NCCL_ERRORS
    log.debug("%s=%s: an NCCL error or timeout raises in the rank instead of killing it",
              NCCL_ERROR_HANDLING, RAISE_NCCL_ERRORS)
    return True


def note_call() -> None:
    """At the process's first decorated call: whether the group was formed before it
    (then podcode re-forms it on resume) or is left to the task (formed inside it)."""
    global _group_at_call
    if _group_at_call is None:
        _group_at_call = _dist() is not None


def in_group() -> bool:
    """Whether this process is one rank of a process group of several (Ray Train's
    workers, torchrun's ranks): its ranks fail, wait and resume together."""
    dist = _dist()
    return dist is not None and dist.get_world_size() > 1


def abort_group(error: BaseException | None = None) -> bool:
    """Break the default process group so peers blocked on this rank fail fast;
    ``error``, the rank's failure, is announced to the pod's other ranks first."""
    global _aborted
    dist = _dist()
    if dist is None or dist.get_world_size() < 2:
        return False
    _join_late(dist)
    store = _default_store(dist)
    if error is not None:
        _announce(error, dist.get_rank(), dist.get_world_size(), store)
        loops.warn_if_inside(error)
    aborted = _Aborted(
        str(dist.get_backend()), dist.get_rank(), dist.get_world_size(), store=store,
        formed_by_task=_group_at_call is False and not _formed_once(),
    )
    cut = gloo_sockets.cut(dist) if "gloo" in aborted.backend.lower() else 0
    how = break_group(dist, aborted.backend)
    if how is None:
        return False
    if aborted.formed_by_task:
        _keep_groups(dist)
    _aborted = aborted
    log.warning(
        "rank %d: process group (%s, %d ranks) %s%s so the other ranks stop waiting on "
        "this one; %s when the session resumes",
        aborted.rank,
        aborted.backend,
        aborted.world_size,
        how,
        f", {cut} gloo connections shut down," if cut else "",
        "the task forms it again" if aborted.formed_by_task else "it is re-formed",
    )
    if "nccl" in aborted.backend.lower() and os.environ.get(NCCL_ERROR_HANDLING) != "2":
        log.warning(
            "%s=%s: a rank whose NCCL collective fails or times out is killed by its watchdog "
            "instead of opening a session (podcode sets 2 when it is unset)",
            NCCL_ERROR_HANDLING, os.environ.get(NCCL_ERROR_HANDLING, "unset, torch's default 3"),
        )
    return True


def _announce(error: BaseException, rank: int, world_size: int, store: Any) -> None:
    """Tell the job (the group's store) and the pod's ranks (their files) this one failed,
    before the group breaks. A rank whose error is the group breaking is never a cause:
    it names the first real failure, where the store or the pod's ranks know it."""
    from interactive.distributed import peers

    pod = peers.current()
    text = f"{type(error).__name__}: {error}"
    broken = peers.broke_with_the_group(error)
    culprit: blame.Failure | None = None
    if broken:
        culprit = _culprit(store, pod)
        local_world = pod.info.local_world_size if pod is not None else world_size
        _blame(error, rank, blame.reason(culprit, other_pods=world_size > local_world))
    else:
        if store is not None:
            blame.record_first(store, _generation, blame.Failure(rank, text, blame.pod_name()))
        if pod is not None and jobsession.several_pods(pod.info):
            jobsession.claim_failure(rank, error)  # its pod serves the job's session
    if pod is None:
        return
    try:
        pod.announce_failure(text, None if culprit is None else culprit.rank, broken=broken)
    except OSError as exc:
        log.warning("rank %d: cannot announce its failure to the other ranks: %s", rank, exc)


def _culprit(store: Any, pod: Peers | None) -> blame.Failure | None:
    """The first real failure: the job's (in the group's store), else one of this pod's
    ranks' (their files)."""
    found = blame.first(store, _generation) if store is not None else None
    if found is not None or pod is None:
        return found
    local = pod.culprit()
    return None if local is None else blame.Failure(local[0], local[1], blame.pod_name())


def _blame(error: BaseException, rank: int, why: str) -> None:
    """Say in ``error`` itself (what its session shows) what stopped this rank."""
    if len(error.args) == 1 and isinstance(error.args[0], str):
        error.args = (f"{why}; here: {error.args[0]}",)
    add_note(error, f"podcode: rank {rank} {why}: fix that rank's bug and resume; "
                    "this rank resumes with it")
    log.warning("rank %d %s; it waits on that bug and resumes with it", rank, why)


def _withdraw() -> None:
    from interactive.distributed import peers

    pod = peers.current()
    if pod is not None:
        pod.withdraw_failure()


class _KeptGroups(dict[Any, Any]):
    """torch's registry of process groups (``distributed_c10d._pg_map``), which also keeps
    a reference to every group registered in it, for the life of the process."""

    kept: list[Any] = []

    def __setitem__(self, group: Any, value: Any) -> None:
        self.kept.append(group)
        super().__setitem__(group, value)


def _keep_groups(dist: Any) -> None:
    """Keep the groups the re-run of the task forms until the process exits.

    A task that forms its group destroys it too (``destroy_process_group()`` at the end
    of ``main``), and its return then frees DDP and the group with it. ``~ProcessGroupGloo``
    joins its worker threads while holding the GIL; a worker that still has to free its
    last all-reduce needs the GIL for it (torch keeps a Python object in the work's
    thread-local state), so the process hangs as the task returns: seen each time with
    4 resumed ranks, now and then with 2, never without podcode. With a reference kept
    here the group is freed at exit, long after its workers are done.
    """
    c10d = dist.distributed_c10d
    registry = getattr(c10d, "_pg_map", None)
    if isinstance(registry, dict) and not isinstance(registry, _KeptGroups):
        c10d._pg_map = _KeptGroups(registry)


def _formed_once() -> bool:
    """Whether a library formed the group through process-wide state that never forms it
    again: Accelerate's ``PartialState``, a singleton (``Accelerator()`` inside the task calls
    ``init_process_group`` at the first call only). podcode re-forms such a group on resume."""
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "PartialState", None), "_shared_state", None)
    return isinstance(shared, dict) and shared.get("backend") is not None


def _default_store(dist: Any) -> Any:
    """The store the default group was formed on (None where torch does not say)."""
    try:
        c10d = dist.distributed_c10d
        return c10d._world.pg_map[c10d._get_default_group()][1]
    except Exception:
        return None


def _join_late(dist: Any) -> None:
    """A launcher that sets no ``RANK`` (``torch.multiprocessing.spawn``, Lightning): the
    rank is read from the group now, and the pod's other ranks are told about it."""
    from interactive.base.settings import podcode_home
    from interactive.distributed import peers, ranks

    if peers.current() is not None:
        return
    info = ranks.from_group(dist)
    try:
        peers.join(podcode_home(), info)
    except OSError:
        log.exception("%s: cannot record this rank for its peers", info.label)


def break_group(dist: Any, backend: str) -> str | None:
    """Break the default group without waiting on its peers; how it was done, or None."""
    c10d = dist.distributed_c10d
    abort = getattr(c10d, "_abort_process_group", None)
    if abort is not None:
        try:
            abort()
            return "aborted"
        except Exception:
            log.debug("_abort_process_group failed", exc_info=True)
    if backend.lower() == "nccl":
        # Destroying an NCCL group with pending collectives waits for them: abort first.
        try:
            torch = sys.modules["torch"]
            c10d._get_default_group()._get_backend(torch.device("cuda")).abort()
        except Exception:
            log.exception("could not abort the NCCL communicators; the other ranks wait for "
                          "their watchdog's timeout")
            return None
    try:
        dist.destroy_process_group()  # gloo: closes its connections; NCCL: after the abort
    except Exception:
        log.exception("could not break the process group; peers wait for its timeout")
        return None
    return "aborted" if backend.lower() == "nccl" else "destroyed"


def reform_group() -> bool:
    """Re-create the group this process aborted (blocks until every rank joins)."""
    global _aborted, _generation
    _withdraw()
    aborted = _aborted
    if aborted is None:
        return False
    import torch.distributed as dist

    if aborted.store is not None:
        _kept_stores.append(aborted.store)  # a peer's new attempt may be connected to it
        leave_together(aborted.store, _generation, aborted.rank, aborted.world_size)
    _generation += 1
    if aborted.formed_by_task or dist.is_initialized():  # the re-run forms it / made one
        log.info("rank %d: the task forms its process group again itself", aborted.rank)
        _aborted = None
        return False
    store = aborted.store if aborted.store is not None else _new_store(aborted)
    log.info("rank %d: re-forming the process group (%s, generation %d)",
             aborted.rank, aborted.backend, _generation)
    dist.init_process_group(
        aborted.backend,
        store=dist.PrefixStore(f"podcode/reform-{_generation}/", store),  # type: ignore[attr-defined]
        rank=aborted.rank,
        world_size=aborted.world_size,
        timeout=REFORM_TIMEOUT,
    )
    _aborted = None
    return True


def leave_together(store: Any, generation: int, rank: int, world_size: int,
                   timeout: datetime.timedelta = REFORM_TIMEOUT) -> bool:
    """Wait on the failed group's ``store`` until every rank has left the failed attempt
    (resumed), so that none starts the next one alone; whether they all did. A store
    that fails or times out is logged, and the rank goes on (its new group then waits)."""
    counter = f"podcode/left-{generation}"
    everyone = f"{counter}/all"
    try:
        if int(store.add(counter, 1)) >= world_size:
            store.set(everyone, b"1")
        else:
            log.warning("rank %d waits for the other ranks to resume before it runs again "
                        "(at most %s)", rank, timeout)
        store.wait([everyone], timeout)
    except Exception as exc:
        log.warning("rank %d: could not wait for every rank to resume (%s); it forms the "
                    "process group again without", rank, exc)
        return False
    return True


def _new_store(aborted: _Aborted) -> Any:
    """The launcher's store at ``MASTER_ADDR:MASTER_PORT``, where the old one is not known.

    Under torchrun the agent hosts it; otherwise rank 0 does, multi-tenant: a store this
    process still serves on that port is reused rather than bound twice (EADDRINUSE).
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    is_master = aborted.rank == 0 and not agent_store
    return TCPStore(host, port, is_master=is_master, timeout=REFORM_TIMEOUT,
                    multi_tenant=is_master)
