"""pytorch/examples' ``distributed/ddp-tutorial-series/multigpu_torchrun.py``, on CPU.

    PODCODE_ENABLE=1 torchrun --nproc-per-node 2 multigpu_torchrun.py 2 1

Changed from the original only where a CPU and a test need it: gloo instead of
NCCL, no ``.to(gpu_id)``, a seeded dataset and model (so that runs can be
compared, and the sampler in order, so that rank 1 holds the last
index), no snapshot file, ``@vscode`` on ``main``, and the final weights'
checksum printed by rank 0. ``--init-at-top`` forms the process group in the
script before ``main`` is called, as many torchrun scripts do, instead of in
``main`` (``ddp_setup``), as the original does.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from interactive import vscode


class MyTrainDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        self.size = size
        generator = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(20, generator=generator), torch.rand(1, generator=generator))
                     for _ in range(size)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index]


def ddp_setup() -> None:
    init_process_group(backend="gloo")


class Trainer:
    def __init__(
        self, model: torch.nn.Module, train_data: DataLoader[tuple[torch.Tensor, torch.Tensor]],
        optimizer: torch.optim.Optimizer, save_every: int,
    ) -> None:
        self.rank = int(os.environ["RANK"])
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> float:
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch: int) -> float:
        b_sz = len(next(iter(self.train_data))[0])
        steps = len(self.train_data)
        print(f"[rank {self.rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {steps}")
        assert isinstance(self.train_data.sampler, DistributedSampler)
        self.train_data.sampler.set_epoch(epoch)
        total = 0.0
        for source, targets in self.train_data:
            total += self._run_batch(source, targets)
        return total

    def train(self, max_epochs: int) -> None:
        for epoch in range(max_epochs):
            total = self._run_epoch(epoch)
            print(f"[rank {self.rank}] Epoch {epoch} | loss {total:.4f}")


def load_train_objs() -> tuple[MyTrainDataset, torch.nn.Module, torch.optim.Optimizer]:
    train_set = MyTrainDataset(256)  # load your dataset
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)  # load your model
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    return train_set, model, optimizer


def prepare_dataloader(
    dataset: Dataset[tuple[torch.Tensor, torch.Tensor]], batch_size: int
) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    return DataLoader(dataset, batch_size=batch_size, shuffle=False,
                      sampler=DistributedSampler(dataset, shuffle=False))


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


@vscode(ide="none")
def main(save_every: int, total_epochs: int, batch_size: int, setup: bool = True) -> float:
    if setup:
        ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every)
    trainer.train(total_epochs)
    if trainer.rank == 0:
        print(f"checksum {checksum(model)!r}", flush=True)
    if setup:
        destroy_process_group()
    return checksum(model)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("save_every", type=int)
    parser.add_argument("--batch_size", default=32, type=int)
    parser.add_argument("--init-at-top", action="store_true")
    args = parser.parse_args()
    if args.init_at_top:
        ddp_setup()
    main(args.save_every, args.total_epochs, args.batch_size, setup=not args.init_at_top)
    if args.init_at_top:
        destroy_process_group()
