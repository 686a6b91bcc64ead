"""Stop training at the first NaN/inf loss, before it reaches a checkpoint (on CPU: before the weights)."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from typing_extensions import override

from lit_gpu.errors import LitGpuError


class NonFiniteLossError(LitGpuError):
    """The training loss became NaN or infinite."""


class _Pending:
    """One GPU step's "loss not finite" flag, copied to host memory without waiting for it."""

    __slots__ = ("where", "flag", "event")

    def __init__(self, loss: torch.Tensor, where: tuple[int, int, int]) -> None:
        self.where = where  # (global step, epoch, batch)
        bad = torch.stack([torch.isnan(loss).any(), torch.isinf(loss).any()])
        self.flag = torch.empty(2, dtype=torch.bool, pin_memory=True)
        self.flag.copy_(bad, non_blocking=True)
        self.event = torch.cuda.Event()
        self.event.record()

    def ready(self) -> bool:
        return self.event.query()

    def kind(self) -> str | None:
        self.event.synchronize()
        nan, inf = self.flag.tolist()
        return "NaN" if nan else "inf" if inf else None


class NaNGuard(Callback):
    """Raise :class:`NonFiniteLossError` naming the global step when the loss is NaN or inf.

    On CPU it checks the loss before ``backward``, so the bad step never updates the weights. On a
    GPU a check that waits for the loss would stall the host every step; there the verdict is
    copied to pinned host memory without waiting and read when it has arrived (usually one or two
    steps later), and at the latest before any checkpoint is written and at the end of training
    (the only host-device waits it adds). Either way raising stops training before a checkpoint
    holds the bad weights: the last good ``last.ckpt`` stays on disk.

    Args:
        enabled: Turn the check off (``--nan_guard.enabled false``), e.g. for fp16 experiments that
            expect occasional overflow.
        check_every_n_steps: Check every N optimizer steps.
    """

    def __init__(self, enabled: bool = True, check_every_n_steps: int = 1) -> None:
        super().__init__()
        self.enabled = enabled
        self.check_every_n_steps = max(1, int(check_every_n_steps))
        self._pending: deque[_Pending] = deque()

    @override
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        if not self.enabled:
            return
        if self.check_every_n_steps > 1 and trainer.global_step % self.check_every_n_steps:
            return
        loss = loss.detach()
        if loss.device.type != "cuda":  # no device to wait for: check now
            if math.isfinite(loss.item()) if loss.numel() == 1 else bool(torch.isfinite(loss).all()):
                return
            kind = "NaN" if bool(torch.isnan(loss).any()) else "inf"
            self._raise(trainer, kind, self._where(trainer), deferred=False)
        while self._pending and self._pending[0].ready():  # arrived: reading them does not wait
            self._check(trainer, self._pending.popleft())
        self._pending.append(_Pending(loss, self._where(trainer)))

    @staticmethod
    def _where(trainer: pl.Trainer) -> tuple[int, int, int]:
        return trainer.global_step, trainer.current_epoch, trainer.fit_loop.epoch_loop.batch_idx

    def flush(self, trainer: pl.Trainer) -> None:
        """Wait for the outstanding GPU checks and raise on a non-finite one."""
        while self._pending:
            self._check(trainer, self._pending.popleft())

    def _check(self, trainer: pl.Trainer, pending: _Pending) -> None:
        kind = pending.kind()
        if kind is not None:
            self._pending.clear()
            self._raise(trainer, kind, pending.where, deferred=True)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self.flush(trainer)  # raising here aborts the save: no checkpoint holds non-finite weights

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.flush(trainer)

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, NonFiniteLossError):
            self._pending.clear()  # otherwise a save on the way out (Ctrl+C) still checks them

    def _raise(self, trainer: pl.Trainer, kind: str, where: tuple[int, int, int], deferred: bool) -> None:
        step, epoch, batch = where
        kept = next(
            (
                cb.last_model_path or cb.best_model_path
                for cb in trainer.checkpoint_callbacks
                if isinstance(cb, ModelCheckpoint) and (cb.last_model_path or cb.best_model_path)
            ),
            None,
        )
        where_kept = f"kept the last good checkpoint {kept}" if kept else "no checkpoint had been saved yet"
        stopped = (
            f"stopped at step {trainer.global_step}, before any checkpoint held it,"
            if deferred
            else "stopped before the bad update"
        )
        raise NonFiniteLossError(
            f"loss became {kind} at global step {step} (epoch {epoch}, batch {batch}); {stopped} and "
            f"{where_kept}; try a lower learning rate, --trainer.gradient_clip_val 1.0, bf16 instead of "
            "fp16, or check the data for NaNs"
        )
