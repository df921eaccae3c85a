"""A two-rank job for torchrun: rank 1 fails before the all-reduce.

    PODCODE_ENABLE=1 torchrun --nproc-per-node 2 examples/distributed/allreduce.py

Rank 1's session opens on its ValueError; podcode aborts the process group, so
rank 0's all-reduce fails at once and rank 0 opens its session too. Fix the
line marked below, resume from either rank, and both ranks finish together.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from interactive import vscode


@vscode(ide="none")
def step(rank: int, values: list[float]) -> float:
    tensor = torch.tensor(values) * (rank + 1)
    if rank == 1:
        raise ValueError(f"bad batch on rank {rank}")  # the bug: replace with pass
    dist.all_reduce(tensor)
    return float(tensor.sum())


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = step(rank, [1.0, 2.0])
    print(f"rank {rank} total {total}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
