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
