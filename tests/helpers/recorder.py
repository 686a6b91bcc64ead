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


class MicroBatchRecorder(pl.Callback):
    """Saves the samples each training forward of the module saw to ``out_dir/micro{rank}.pt``.

    ``{"sizes": [(global_step, n), ...], "micro_batch_size": OOMRecovery's value at fit end or None}``.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.sizes: list[tuple[int, int]] = []
        self._handle = None

    def setup(self, trainer, pl_module, stage) -> None:
        def record(module, args):
            if trainer.training and isinstance(args[0], torch.Tensor):  # not DDP's redirected training_step
                self.sizes.append((trainer.global_step, int(args[0].shape[0])))

        if self._handle is None:
            self._handle = pl_module.register_forward_pre_hook(record)

    def on_train_end(self, trainer, pl_module) -> None:
        from lit_gpu.oom.recovery import OOMRecovery

        micro = next((cb.micro_batch_size for cb in trainer.callbacks if isinstance(cb, OOMRecovery)), None)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(
            {"sizes": self.sizes, "micro_batch_size": micro},
            self.out_dir / f"micro{trainer.global_rank}.pt",
        )
