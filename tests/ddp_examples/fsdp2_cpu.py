"""FSDP2 (``fully_shard``) over a CPU device mesh (gloo), 2 ranks under torchrun.

    PODCODE_ENABLE=1 torchrun --nproc-per-node 2 fsdp2_cpu.py

The shape of pytorch/examples' ``distributed/FSDP2/example.py`` (a device mesh, ``fully_shard``
on each block then on the root, a plain training loop) on CPU: gloo, a small seeded MLP and
dataset (``DistributedSampler`` in order, so that rank 1 holds the last index), ``@vscode`` on
``main``, which forms the group, and the full weights' checksum printed by rank 0.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from interactive import vscode


class MyTrainDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        self.size = size
        generator = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(16, generator=generator), torch.rand(1, generator=generator))
                     for _ in range(size)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index]


def checksum(model: torch.nn.Module) -> float:
    """Every parameter gathered in full (a collective: every rank calls it)."""
    total = 0.0
    for p in model.parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        total += float(full.detach().double().sum())
    return total


@vscode(ide="none")
def main(epochs: int) -> float:
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    dataset = MyTrainDataset(128)
    loader = DataLoader(dataset, batch_size=16, sampler=DistributedSampler(dataset, shuffle=False))
    for epoch in range(epochs):
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(inputs), targets)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.item()
        print(f"[rank {dist.get_rank()}] epoch {epoch} | loss {total:.4f}", flush=True)
    weights = checksum(model)
    if dist.get_rank() == 0:
        print(f"checksum {weights!r}", flush=True)
    dist.destroy_process_group()
    return weights


if __name__ == "__main__":
    main(2)
