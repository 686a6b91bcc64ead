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


class SignalAtStep(pl.Callback):
    """Sends its own process ``signal_name`` once step ``step`` finished: a preemption at a known step."""

    def __init__(self, step: int, signal_name: str = "SIGTERM") -> None:
        self.step = step
        self.signal_name = signal_name

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            import os
            import signal

            os.kill(os.getpid(), getattr(signal, self.signal_name))


class ForeignClassifier(pl.LightningModule):
    """A plain LightningModule (none of lit_gpu's): ``self.log`` of tensors and torchmetrics, a step-wise
    scheduler, and the learning rate logged once an epoch (its first batch) as many modules do."""

    def __init__(self, lr: float = 0.002, dropout: float = 0.5, val_on_step: bool = False) -> None:
        super().__init__()
        from torch import nn
        from torchmetrics.classification import MulticlassAccuracy

        self.lr = lr
        self.val_on_step = val_on_step  # validation values logged per step too (a row per validation batch)
        self.net = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(784, 10))
        self.train_acc = MulticlassAccuracy(num_classes=10, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes=10, average="micro")

    def forward(self, x):
        return self.net(x)

    def on_train_batch_start(self, batch, batch_idx) -> None:
        if batch_idx == 0:
            self.log("lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=True, on_epoch=True)
        self.log("train/loss_max", loss, on_step=False, on_epoch=True, reduce_fx="max")
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_acc.update(logits, y)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.log("val/loss", loss, prog_bar=True, on_step=self.val_on_step, on_epoch=True)
        self.log("val/acc", self.val_acc)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
