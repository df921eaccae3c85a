"""``transformers.Trainer`` on a tiny BERT built from a config (no download), 2 CPU ranks.

    PODCODE_ENABLE=1 torchrun --nproc-per-node 2 transformers_tiny.py

The usual Trainer script (``TrainingArguments``, ``Trainer(model, args, train_dataset)``,
``trainer.train()``) on a ``BertConfig`` of 2 tiny layers and a seeded synthetic dataset of
token ids and labels; ``@vscode`` on ``main``, the function that builds the model and the
Trainer and calls ``trainer.train()``; the final weights' checksum printed by rank 0.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
)

from interactive import vscode


class SyntheticDataset(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, size: int, vocab: int, length: int) -> None:
        self.size = size
        generator = torch.Generator().manual_seed(0)
        self.ids = [torch.randint(vocab, (length,), generator=generator) for _ in range(size)]
        self.labels = [int(i[0]) % 2 for i in self.ids]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": torch.tensor(self.labels[index])}


def checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


@vscode(ide="none")
def main(output_dir: str) -> float:
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    args = TrainingArguments(output_dir=output_dir, use_cpu=True, per_device_train_batch_size=4,
                             num_train_epochs=2, learning_rate=1e-3, seed=0, report_to=[],
                             save_strategy="no", logging_strategy="no", disable_tqdm=True)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    trainer = Trainer(model=model, args=args, train_dataset=SyntheticDataset(64, 64, 16))
    trainer.train()
    weights = checksum(model)
    if trainer.is_world_process_zero():
        print(f"checksum {weights!r}", flush=True)
    return weights


if __name__ == "__main__":
    main("trainer-output")
