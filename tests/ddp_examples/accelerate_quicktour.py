"""Accelerate's quicktour training loop (its docs, "Quicktour"), on 2 CPU ranks.

    ACCELERATE_USE_CPU=true PODCODE_ENABLE=1 accelerate launch --multi_gpu --num_processes 2 \\
        accelerate_quicktour.py

The loop is the quicktour's, in a ``training_function`` as Accelerate's ``examples/`` write it
(the ``Accelerator`` made inside it). Changed only where a CPU and a test need it: a tiny seeded
model and dataset (a ``Dataset`` like pytorch/examples' DDP tutorial's, so that rank 1 holds the
last batch), ``Accelerator(cpu=True)``, ``@vscode`` on ``training_function``, and the final
weights' checksum printed by the main process. ``--accelerator-at-top`` makes the
``Accelerator`` at the top of the script instead, before the decorated call.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from accelerate import Accelerator  # type: ignore[import-untyped]
from torch.utils.data import DataLoader, Dataset

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


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


@vscode(ide="none")
def training_function(epochs: int, accelerator: Accelerator | None = None) -> float:
    accelerator = accelerator or Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.9)
    training_dataloader = DataLoader(MyTrainDataset(64), batch_size=8)
    loss_function = F.mse_loss

    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    for epoch in range(epochs):
        total = 0.0
        for batch in training_dataloader:
            optimizer.zero_grad()
            inputs, targets = batch
            outputs = model(inputs)
            loss = loss_function(outputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            total += loss.item()
        print(f"[rank {accelerator.process_index}] epoch {epoch} | loss {total:.4f}", flush=True)

    accelerator.wait_for_everyone()
    weights = checksum(accelerator.unwrap_model(model))
    if accelerator.is_main_process:
        print(f"checksum {weights!r}", flush=True)
    return weights


if __name__ == "__main__":
    at_top = Accelerator(cpu=True) if "--accelerator-at-top" in sys.argv else None
    training_function(2, at_top)
