"""Test-only modules and callbacks for the exact-resume tests (importable by CLI subprocesses)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch

from lit_gpu.modules import RegressionModule


class OneCycleRegression(RegressionModule):
    """Sizes OneCycleLR with ``trainer.estimated_stepping_batches`` (the Lightning #20550 trigger).

    Reading it in ``configure_optimizers`` makes the fit loop build the train loader before the
    checkpoint's loop state (and with it the loader state) is restored.
    """

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class SampleRecorder(pl.Callback):
    """Records ``(epoch, inputs)`` of every training batch (to ``out_dir/rank{R}.pt`` at fit end).

    Also keeps the ``(epoch, batch_idx)`` pairs Lightning reported, and the epochs that validated.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.batches: list[tuple[int, torch.Tensor]] = []
        self.batch_idx: list[tuple[int, int]] = []
        self.validated: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batches.append((trainer.current_epoch, batch[0].detach().cpu().clone()))
        self.batch_idx.append((trainer.current_epoch, batch_idx))

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.validated.append(trainer.current_epoch)

    def on_train_end(self, trainer, pl_module) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        torch.save(
            {"batches": self.batches, "world_size": trainer.world_size},
            self.out_dir / f"rank{trainer.global_rank}.pt",
        )


class StopAtStep(pl.Callback):
    """Asks the trainer to stop after step ``step`` (unlike ``max_steps``, nothing is sized by it)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.should_stop = True


class NoisyRegression(RegressionModule):
    """Adds input noise from the global torch RNG (like dropout); Ctrl+C in step ``interrupt_at``.

    The interrupt lands after the step drew its noise, before the optimizer step: a batch in flight.
    """

    def __init__(self, *args, interrupt_at: int = -1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.interrupt_at = interrupt_at

    def training_step(self, batch, batch_idx):
        x, y = batch
        x = x + 0.01 * torch.randn_like(x)
        if self.trainer.global_step == self.interrupt_at:
            raise KeyboardInterrupt
        return super().training_step((x, y), batch_idx)
