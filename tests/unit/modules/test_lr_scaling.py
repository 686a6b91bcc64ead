"""Opt-in linear LR scaling by world size, and the effective LR in the logs."""

from __future__ import annotations

import csv
from functools import partial

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import SingleDeviceStrategy

from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel


class _FakeWorld(SingleDeviceStrategy):
    """One CPU process that reports a world of 4 (as rank 0 of a 4-process DDP run would)."""

    def __init__(self) -> None:
        super().__init__(device="cpu")
        self.world_size = 4


def _fit(tmp_path, strategy, scale: bool):
    module = RegressionModule(
        SimpleModel(4, 2), optimizer=partial(torch.optim.SGD, lr=0.01), scale_lr_by_world_size=scale
    )
    trainer = pl.Trainer(
        accelerator="cpu", strategy=strategy, max_epochs=2, limit_train_batches=3, limit_val_batches=1,
        logger=CSVLogger(tmp_path, name="lr"), enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, log_every_n_steps=1,
    )  # fmt: skip
    trainer.fit(
        module, SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=64, batch_size=8)
    )
    with open(trainer.logger.log_dir + "/metrics.csv") as f:
        logged = [float(r["train/lr"]) for r in csv.DictReader(f) if r.get("train/lr")]
    return trainer, logged


@pytest.mark.parametrize(("scale", "expected"), [(True, 0.04), (False, 0.01)])
def test_lr_scales_with_world_size_and_is_logged(tmp_path, scale, expected):
    trainer, logged = _fit(tmp_path, _FakeWorld(), scale)
    assert trainer.world_size == 4
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(expected)
    assert logged and logged == pytest.approx([expected] * len(logged))
    assert trainer.callback_metrics["train/lr"].item() == pytest.approx(expected)


def test_dp_does_not_scale_its_single_process_batch(tmp_path):
    # dp splits one batch across GPUs: the global batch is unchanged, so is the LR
    trainer, logged = _fit(tmp_path, "dp", scale=True)
    assert trainer.world_size == 1
    assert logged and logged == pytest.approx([0.01] * len(logged))
