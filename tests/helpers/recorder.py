"""Test-only callback: records every training batch a rank sees (importable by CLI subprocesses)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch


class BatchRecorder(pl.Callback):
    """Saves ``{"inputs": [batch0, ...], "world_size": W}`` to ``out_dir/rank{global_rank}.pt`` at fit end."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.inputs: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.inputs.append(batch[0].detach().cpu().clone())

    def on_train_end(self, trainer, pl_module) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(
            {"inputs": self.inputs, "world_size": trainer.world_size},
            self.out_dir / f"rank{trainer.global_rank}.pt",
        )
