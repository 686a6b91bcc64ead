import lightning.pytorch as pl
import torch

from lit_gpu.callbacks import FreshLastCheckpoint
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.trainers import quiet_trainer


def _fit(tmp_path, callback, epochs=4):
    pl.seed_everything(0)
    trainer = quiet_trainer(
        tmp_path,
        max_epochs=epochs,
        limit_train_batches=3,
        limit_val_batches=1,
        enable_checkpointing=True,
        callbacks=[callback],
    )
    trainer.fit(RegressionModule(SimpleModel(4, 4)), datamodule=SyntheticRegressionDataModule(4, 4, 64, 16))
    return trainer


def test_last_follows_training_when_monitor_stops_improving(tmp_path):
    # mode="max" on a falling loss: only the first epoch is "best"
    cb = FreshLastCheckpoint(
        dirpath=tmp_path, monitor="val/loss", mode="max", save_last=True, filename="best"
    )
    trainer = _fit(tmp_path, cb)
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)
    best = torch.load(tmp_path / "best.ckpt", weights_only=True)
    assert best["global_step"] == 3
    assert last["global_step"] == trainer.global_step == 12
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["best.ckpt", "last.ckpt"]


def test_stock_lightning_leaves_last_stale(tmp_path):
    """Documents the upstream behaviour the subclass fixes (fails if Lightning changes it)."""
    from lightning.pytorch.callbacks import ModelCheckpoint as Stock

    cb = Stock(dirpath=tmp_path, monitor="val/loss", mode="max", save_last=True, filename="best")
    _fit(tmp_path, cb)
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 3


class _LastStepAtBatchStart(pl.Callback):
    """Records the global step of last.ckpt on disk when each training batch starts."""

    def __init__(self, path) -> None:
        self.path = path
        self.seen: list[tuple[int, int | None]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = torch.load(self.path, weights_only=True)["global_step"] if self.path.exists() else None
        self.seen.append((trainer.global_step, step))


def test_step_save_points_write_last_before_the_first_validation(tmp_path):
    """Lightning defers a step save until the monitored metric exists; last.ckpt must not wait."""
    seen = _LastStepAtBatchStart(tmp_path / "last.ckpt")
    cb = FreshLastCheckpoint(dirpath=tmp_path, monitor="val/loss", save_last=True, every_n_train_steps=2)
    pl.seed_everything(0)
    trainer = quiet_trainer(
        tmp_path, max_epochs=1, limit_train_batches=5, limit_val_batches=1, enable_checkpointing=True,
        callbacks=[cb, seen],
    )  # fmt: skip
    trainer.fit(RegressionModule(SimpleModel(4, 4)), datamodule=SyntheticRegressionDataModule(4, 4, 64, 8))
    assert seen.seen == [(0, None), (1, None), (2, 2), (3, 2), (4, 4)]  # epoch 0, no validation yet


def test_time_interval_writes_last_mid_epoch(tmp_path):
    from datetime import timedelta

    seen = _LastStepAtBatchStart(tmp_path / "last.ckpt")
    every_step = timedelta(0)
    cb = FreshLastCheckpoint(
        dirpath=tmp_path, monitor="val/loss", save_last=True, train_time_interval=every_step
    )
    pl.seed_everything(0)
    trainer = quiet_trainer(
        tmp_path, max_epochs=1, limit_train_batches=4, limit_val_batches=1, enable_checkpointing=True,
        callbacks=[cb, seen],
    )  # fmt: skip
    trainer.fit(RegressionModule(SimpleModel(4, 4)), datamodule=SyntheticRegressionDataModule(4, 4, 64, 8))
    assert seen.seen == [(0, None), (1, 1), (2, 2), (3, 3)]
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 4  # and the epoch end
