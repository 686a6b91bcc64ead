"""Restored metric states survive the module's own hooks of a resumed fit's start.

lightning-hydra-template's ``MNISTLitModule`` resets ``val_acc_best`` in its ``on_train_start`` (to drop the
sanity check's values); Lightning runs a callback's ``on_train_start`` before the module's, so a state put
back there was reset again (issue 57: the resumed ``val/acc_best`` 0.852 where the uninterrupted run logs
0.875). The module here has that shape; its validation labels are the training rule inverted, so the
validation accuracy falls as it trains and the best stays the first epoch's.
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from lit_gpu.callbacks import CheckpointOnInterrupt, FreshLastCheckpoint, RNGStateCallback
from lit_gpu.resume.state import LoggingStateCallback
from tests.helpers.trainers import quiet_trainer


class TemplateModule(pl.LightningModule):
    """The shape of lightning-hydra-template's MNISTLitModule: metric objects, reset at the fit's start."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(8, 2)
        self.train_acc, self.val_acc = MulticlassAccuracy(2), MulticlassAccuracy(2)
        self.train_loss, self.val_loss = MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()

    def on_train_start(self) -> None:
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def _step(self, batch):
        x, y = batch
        logits = self.net(x)
        return nn.functional.cross_entropy(logits, y), logits.argmax(dim=1), y

    def training_step(self, batch, batch_idx):
        loss, preds, targets = self._step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, preds, targets = self._step(batch)
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True)

    def on_validation_epoch_end(self) -> None:
        self.val_acc_best(self.val_acc.compute())
        self.log("val/acc_best", self.val_acc_best.compute())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class InvertedData(pl.LightningDataModule):
    """Labels by a fixed linear rule; the validation set's inverted."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(160, 8, generator=generator)
        self.y = (self.x @ torch.randn(8, generator=generator) > 0).long()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x, self.y), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x[:64], 1 - self.y[:64]), batch_size=32)


class SignalAfterBatch(pl.Callback):
    def __init__(self, batch: int) -> None:
        self.batch, self.seen = batch, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen += 1
        if self.seen == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)


def _fit(root: Path, version: int, *, stop: int | None = None, resume: bool = False) -> TemplateModule:
    pl.seed_everything(7)
    callbacks = [RNGStateCallback(), LoggingStateCallback(), CheckpointOnInterrupt()]
    callbacks += [SignalAfterBatch(stop)] if stop else []
    callbacks.append(FreshLastCheckpoint(dirpath=root / "ckpt", save_last=True, save_top_k=0))
    trainer = quiet_trainer(
        root,
        max_epochs=3,
        enable_checkpointing=True,
        deterministic=True,
        callbacks=callbacks,
        logger=CSVLogger(root, name="logs", version=version),
    )
    model = TemplateModule()
    ckpt = str(root / "ckpt" / "last.ckpt") if resume else None
    with contextlib.suppress(SystemExit):  # the stop's exit
        trainer.fit(model, datamodule=InvertedData(), ckpt_path=ckpt)
    return model


def _column(root: Path, name: str, *versions: int) -> list[str]:
    values = []
    for version in versions:
        with open(root / "logs" / f"version_{version}" / "metrics.csv", newline="") as f:
            values += [row[name] for row in csv.DictReader(f) if row.get(name)]
    return values


def test_a_metric_the_module_resets_at_train_start_keeps_its_restored_state(tmp_path):
    ref = _fit(tmp_path / "ref", 0)
    expected = _column(tmp_path / "ref", "val/acc_best", 0)
    accs = [float(v) for v in _column(tmp_path / "ref", "val/acc", 0)]
    assert accs[1] < accs[0] and float(expected[1]) == accs[0]  # the best is epoch 1's: the case can show
    _fit(tmp_path / "run", 0, stop=15)  # a stop in epoch 2
    model = _fit(tmp_path / "run", 1, resume=True)
    assert _column(tmp_path / "run", "val/acc_best", 0, 1) == expected
    for name in ("train/acc", "train/loss", "val/acc"):
        assert _column(tmp_path / "run", name, 0, 1) == _column(tmp_path / "ref", name, 0), name
    assert torch.equal(model.val_acc_best.compute(), ref.val_acc_best.compute())
    for x, y in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(x, y)


def test_a_fresh_fit_still_resets_what_the_module_resets(tmp_path):
    """No resume: the module's reset at on_train_start drops the sanity check's values, as in Lightning."""
    model = _fit(tmp_path, 0)
    best = _column(tmp_path, "val/acc_best", 0)
    accs = _column(tmp_path, "val/acc", 0)
    assert best[0] == accs[0] and model.val_acc_best.compute() == max(float(a) for a in accs)
