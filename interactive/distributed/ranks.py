"""Which rank of a distributed job this process is, read from the launcher's environment.

torchrun and Kubeflow's PyTorchJob set ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``; Open MPI sets
``OMPI_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``/``_LOCAL_SIZE``; Slurm's
``srun`` sets ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID`` and
``SLURM_NTASKS_PER_NODE``. Pure: the environment is passed in.

Launchers that set no ``RANK`` (``torch.multiprocessing.spawn``; Lightning's
subprocess launcher, which sets ``LOCAL_RANK`` and ``WORLD_SIZE`` only) leave
the rank to ``torch.distributed``: :func:`from_group` reads it from the
process group once there is one (at the failure, at the latest).
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

from interactive.base.errors import RankError
from interactive.base.types import Environ

_SOURCES = (
    # (rank, world size, local rank, local world size), first match wins
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
)


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in its job; a single process is rank 0 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    """Rank among the processes of this pod (node): the port offset."""
    local_world_size: int = 1
    """How many ranks run in this pod."""

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def label(self) -> str:
        return f"rank {self.rank}/{self.world_size} (local {self.local_rank})"

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _int(environ: Environ, name: str, default: int | None) -> int:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        if default is None:
            raise RankError(f"{name} is not set")
        return default
    try:
        # Slurm writes e.g. "4(x2)" for heterogeneous nodes: the first count is ours.
        return int(raw.split("(", 1)[0].split(",", 1)[0])
    except ValueError:
        raise RankError(f"{name}={raw!r} is not an integer") from None


def detect(environ: Environ | None = None) -> RankInfo:
    """This process's rank, from the first launcher whose variables are set; without
    ``environ`` (this process), from its process group where no launcher says."""
    if environ is None:
        info = from_environ(os.environ)
        dist = sys.modules.get("torch.distributed")
        if info.distributed or dist is None or not dist.is_available():
            return info
        return from_group(dist) if dist.is_initialized() else info
    return from_environ(environ)


def from_group(dist: Any, environ: Environ | None = None) -> RankInfo:
    """The rank and world size of ``dist``'s default group; the local ones from
    ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` where set, else every rank is taken to be on
    this node (``torch.multiprocessing.spawn``)."""
    environ = os.environ if environ is None else environ
    rank, world = int(dist.get_rank()), int(dist.get_world_size())
    local = _int(environ, "LOCAL_RANK", rank if world > 1 else 0)
    local_world = _int(environ, "LOCAL_WORLD_SIZE", max(world, local + 1))
    if not 0 <= local < local_world:
        raise RankError(f"LOCAL_RANK={local} is outside LOCAL_WORLD_SIZE={local_world}")
    return RankInfo(rank, world, local, local_world)


def from_environ(environ: Environ) -> RankInfo:
    """This process's rank, from the first launcher whose variables are set in ``environ``."""
    for rank_var, world_var, local_var, local_world_var in _SOURCES:
        if rank_var not in environ or world_var not in environ:
            continue
        rank = _int(environ, rank_var, None)
        world = _int(environ, world_var, None)
        # No local variables (a PyTorchJob pod running its script directly): one rank per pod.
        local = _int(environ, local_var, 0)
        local_world = _int(environ, local_world_var, local + 1)
        if not 0 <= rank < world:
            raise RankError(f"{rank_var}={rank} is outside {world_var}={world}")
        if not 0 <= local < max(local_world, 1):
            raise RankError(f"{local_var}={local} is outside {local_world_var}={local_world}")
        return RankInfo(rank, world, local, local_world)
    return RankInfo()
