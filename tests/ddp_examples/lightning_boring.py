"""Lightning's ``examples/pytorch/bug_report/bug_report_model.py`` (BoringModel) on 2 CPU ranks.

    PODCODE_ENABLE=1 python lightning_boring.py

Changed from the original only where 2 ranks and a test need it: ``Trainer(accelerator="cpu",
devices=2, strategy="ddp")`` (Lightning's launcher runs this script again for rank 1, with
``LOCAL_RANK=1``), seeded data, model and sampler (so that rank 1 draws the dataset's last index
at its second step), no validation or test loop, every batch of 2 epochs,
no logger or checkpoint files, ``@vscode`` on ``run`` (the function that calls ``trainer.fit``),
and the final weights' checksum printed by rank 0. ``--decorate-step`` puts ``@vscode`` on
``training_step`` instead, to show what that gives.

``--num-nodes N`` passes ``num_nodes=N`` to the Trainer (default 1), for a job whose ranks
torchrun starts, ``devices`` of them on each of N nodes: Lightning then finds torchrun's
environment (``TorchElasticEnvironment``) and starts no process of its own:

    torchrun --nnodes 2 --node-rank K --nproc-per-node 2 ... lightning_boring.py --num-nodes 2
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch.utils.data import DataLoader, Dataset

from interactive import vscode


class RandomDataset(Dataset[torch.Tensor]):
    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size, generator=torch.Generator().manual_seed(0))

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class BoringModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)  # type: ignore[no-any-return]

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> dict[str, Any]:
        loss = self(batch).sum()
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)


NUM_NODES = int(sys.argv[sys.argv.index("--num-nodes") + 1]) if "--num-nodes" in sys.argv else 1
"""``num_nodes`` for the Trainer: ``--num-nodes N`` on the command line, or 1."""


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


@vscode(ide="none")
def run() -> float:
    seed_everything(1, verbose=False)
    train_data = DataLoader(RandomDataset(32, 64), batch_size=2)

    model = BoringModel()
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        num_nodes=NUM_NODES,
        strategy="ddp",
        default_root_dir=os.getcwd(),
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train_dataloaders=train_data)
    if trainer.global_rank == 0:
        print(f"checksum {checksum(model)!r}", flush=True)
    return checksum(model)


if __name__ == "__main__":
    if "--decorate-step" in sys.argv:  # not where @vscode goes: see docs/frameworks.md
        BoringModel.training_step = vscode(ide="none")(BoringModel.training_step)  # type: ignore[method-assign]
        run.__wrapped__()  # type: ignore[attr-defined]
    else:
        run()
