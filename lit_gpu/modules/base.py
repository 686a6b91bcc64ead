"""Shared LightningModule logic: one ``_step`` for every stage, injectable optimizer and scheduler."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn

from lit_gpu.checkpoints import NET_SPEC_KEY, net_spec


class LitModule(pl.LightningModule):
    """Base module: wraps ``net`` and runs the same ``_step(batch, stage)`` for train/val/test.

    Subclass it and override:
        * ``compute_loss(outputs, targets)`` to change the loss;
        * ``update_metrics(outputs, targets, stage)`` to add metrics.

    Args:
        net: Any ``nn.Module`` mapping inputs to outputs. Available as ``self.net``.
        optimizer: Callable ``params -> Optimizer`` (LightningCLI injects it from ``--optimizer``).
        scheduler: Optional callable ``optimizer -> LRScheduler`` (``--lr_scheduler`` in the CLI).
        scheduler_interval: ``"epoch"`` or ``"step"``: when the scheduler steps.
        scale_lr_by_world_size: Multiply every param group's LR by the number of processes
            (DDP world size): the linear scaling rule for a global batch that grows with the GPUs.
    """

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerCallable = torch.optim.Adam,
        scheduler: LRSchedulerCallable | None = None,
        scheduler_interval: str = "epoch",
        scale_lr_by_world_size: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler"])
        self.net = net
        # class path + init args of the net, stored in checkpoints for `lit-gpu export`
        self.net_spec = net_spec(net)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval
        self.scale_lr_by_world_size = scale_lr_by_world_size

    # ---- things a researcher overrides -------------------------------------------------
    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Loss between ``net(inputs)`` and ``targets``. Override in subclasses."""
        raise NotImplementedError

    def update_metrics(self, outputs: torch.Tensor, targets: torch.Tensor, stage: str) -> None:
        """Update and log stage metrics (called after the loss). Default: nothing."""

    # ---- shared plumbing ---------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _step(self, batch: Any, stage: str) -> torch.Tensor:
        inputs, targets = batch[0], batch[1]
        outputs = self(inputs)
        loss = self.compute_loss(outputs, targets)
        self.log(
            f"{stage}/loss",
            loss,
            prog_bar=stage != "test",
            on_step=stage == "train",
            on_epoch=True,
            sync_dist=True,
            batch_size=len(inputs),
        )
        self.update_metrics(outputs.detach(), targets, stage)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        inputs = batch[0] if isinstance(batch, list | tuple) else batch
        return self(inputs)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[NET_SPEC_KEY] = self.net_spec

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.scale_lr_by_world_size:
            world = max(1, self.trainer.world_size if self._trainer is not None else 1)
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * world
                if "initial_lr" in group:
                    group["initial_lr"] = group["initial_lr"] * world
                # OneCycleLR and friends read these instead of "lr"
                if "max_lr" in group:
                    group["max_lr"] = group["max_lr"] * world
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        config: dict[str, Any] = {"scheduler": scheduler, "interval": self.scheduler_interval}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            config["monitor"] = "val/loss"
        return {"optimizer": optimizer, "lr_scheduler": config}

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0 and self.trainer is not None and self.trainer.optimizers:
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            self.log("train/lr", lr, on_step=True, on_epoch=False, rank_zero_only=True)
