"""Classification with cross-entropy and torchmetrics accuracy."""

from __future__ import annotations

from typing import Any

import torch
import torchmetrics
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn
from torch.nn import functional as F
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.modules.base import LitModule


class ClassificationModule(LitModule):
    """Multi-class classifier: cross-entropy loss, ``val/acc`` and ``test/acc``.

    Subclass and override ``compute_loss`` (e.g. label smoothing, focal loss) or
    ``update_metrics`` (more torchmetrics). The net returns logits of shape ``(B, num_classes)``.

    Args:
        net: Logit-producing network.
        num_classes: Number of classes (for the accuracy metrics).
        label_smoothing: Passed to ``F.cross_entropy``.
        train_acc: Also track ``train/acc``. Off by default: it costs a metric update and a
            ``self.log`` call on every training step (about 7 % of a small MNIST step on CPU,
            see docs/benchmarks.md, "lit_gpu overhead").
        **kwargs: ``optimizer``, ``scheduler``, ... as in :class:`LitModule`.
    """

    def __init__(
        self,
        net: nn.Module,
        num_classes: int = 10,
        label_smoothing: float = 0.0,
        train_acc: bool = False,
        optimizer: OptimizerCallable = torch.optim.Adam,
        scheduler: LRSchedulerCallable | None = None,
        scheduler_interval: str = "epoch",
        scale_lr_by_world_size: bool = False,
    ) -> None:
        super().__init__(net, optimizer, scheduler, scheduler_interval, scale_lr_by_world_size)
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing
        acc = torchmetrics.Accuracy(task="multiclass", num_classes=num_classes)
        self.train_acc = acc.clone() if train_acc else None
        self.val_acc = acc.clone()
        self.test_acc = acc.clone()

    @override
    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if outputs.dim() == 2 and outputs.shape[1] != self.num_classes:  # a shape compare: no GPU sync
            raise LitGpuError(
                messages.NUM_CLASSES_MISMATCH.format(
                    net=type(self.net).__name__, outputs=outputs.shape[1], num_classes=self.num_classes
                )
            )
        if outputs.dtype is not torch.float32:  # .float() of a float32 tensor is the tensor itself
            outputs = outputs.float()
        return F.cross_entropy(outputs, targets, label_smoothing=self.label_smoothing)

    @override
    def update_metrics(self, outputs: torch.Tensor, targets: torch.Tensor, stage: str) -> None:
        # one attribute read a step (not a dict of all three: nn.Module looks each metric up in Python)
        metric = self.train_acc if stage == "train" else self.val_acc if stage == "val" else self.test_acc
        if metric is None:
            return
        metric(outputs, targets)
        self.log(f"{stage}/acc", metric, on_step=False, on_epoch=True, prog_bar=stage == "val")

    @override
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        """Class probabilities ``(B, num_classes)``."""
        inputs = batch[0] if isinstance(batch, list | tuple) else batch
        return torch.softmax(self._forward_batch(inputs).float(), dim=-1)
