"""Which rank of a distributed job this process is, read from the launcher's environment.

torchrun and Kubeflow's PyTorchJob set ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``; Open MPI sets
``OMPI_COMM_WORLD_RANK``/``_SIZE``/``_LOCAL_RANK``/``_LOCAL_SIZE``; Slurm's
``srun`` sets ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID`` and
``SLURM_NTASKS_PER_NODE``. Pure: the environment is passed in.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

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
    """This process's rank, from the first launcher whose variables are set."""
    environ = os.environ if environ is None else environ
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
