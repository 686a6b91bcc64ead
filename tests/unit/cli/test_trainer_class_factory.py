"""A ``trainer_class`` factory that returns something other than a Trainer: one line, not an AttributeError
deep in lit_gpu (LightningCLI then calls ``trainer.fit``; lit_gpu's guarantees need ``trainer.callbacks``)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from lit_gpu.cli.lightning_cli import LitGpuCLI
from lit_gpu.errors import LitGpuError

BORING = "lightning.pytorch.demos.boring_classes.BoringModel"


def not_a_trainer(max_epochs: int = 1) -> pl.Trainer:
    return {"max_epochs": max_epochs}  # type: ignore[return-value]


def a_trainer(max_epochs: int = 1, default_root_dir: str = ".") -> pl.Trainer:
    return pl.Trainer(max_epochs=max_epochs, default_root_dir=default_root_dir, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, limit_train_batches=1,
                      limit_val_batches=0)  # fmt: skip


def test_a_factory_returning_no_trainer_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LitGpuError, match=r"trainer_class not_a_trainer returned dict, not a lightning"):
        LitGpuCLI(trainer_class=not_a_trainer, args=["fit", "--model", BORING])


def test_a_factory_returning_a_trainer_runs_with_the_guarantees(tmp_path, monkeypatch):
    from lit_gpu.preemption import CheckpointOnInterrupt

    monkeypatch.chdir(tmp_path)
    cli = LitGpuCLI(trainer_class=a_trainer, args=["fit", "--model", BORING])
    assert any(isinstance(cb, CheckpointOnInterrupt) for cb in cli.trainer.callbacks)
    assert cli.trainer.global_step == 1
