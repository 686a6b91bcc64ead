"""Stop training at the first NaN/inf loss, before it reaches the weights or a checkpoint."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from typing_extensions import override

from lit_gpu.errors import LitGpuError


class NonFiniteLossError(LitGpuError):
    """The training loss became NaN or infinite."""


class NaNGuard(Callback):
    """Raise :class:`NonFiniteLossError` naming the global step when the loss is NaN or inf.

    It checks the loss before ``backward``, so the bad step never updates the weights, and raising
    stops training before any checkpoint is written: the last good ``last.ckpt`` stays on disk.

    Args:
        enabled: Turn the check off (``--nan_guard.enabled false``), e.g. for fp16 experiments that
            expect occasional overflow.
        check_every_n_steps: Check every N optimizer steps (each check syncs with the GPU once).
    """

    def __init__(self, enabled: bool = True, check_every_n_steps: int = 1) -> None:
        super().__init__()
        self.enabled = enabled
        self.check_every_n_steps = max(1, int(check_every_n_steps))

    @override
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        if not self.enabled or trainer.global_step % self.check_every_n_steps:
            return
        if bool(torch.isfinite(loss.detach()).all()):
            return
        kind = "NaN" if bool(torch.isnan(loss.detach()).any()) else "inf"
        kept = next(
            (
                cb.last_model_path or cb.best_model_path
                for cb in trainer.checkpoint_callbacks
                if isinstance(cb, ModelCheckpoint) and (cb.last_model_path or cb.best_model_path)
            ),
            None,
        )
        where = f"kept the last good checkpoint {kept}" if kept else "no checkpoint had been saved yet"
        raise NonFiniteLossError(
            f"loss became {kind} at global step {trainer.global_step} (epoch {trainer.current_epoch}, "
            f"batch {trainer.fit_loop.epoch_loop.batch_idx}); stopped before the bad update and {where}; "
            "try a lower learning rate, --trainer.gradient_clip_val 1.0, bf16 instead of fp16, or check "
            "the data for NaNs"
        )
