"""CheckpointOnInterrupt on a plain Trainer: a signal mid-step stops at the step boundary and saves."""

from __future__ import annotations

import os
import signal

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_gpu.callbacks import CheckpointOnInterrupt
from lit_gpu.callbacks.interrupt import stop_exit_code
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.trainers import quiet_trainer


class _SignalDuringStep(pl.Callback):
    """Sends ``signum`` to this process in the middle of training step ``at`` (before the optimizer step)."""

    def __init__(self, signum: int, at: int) -> None:
        self.signum, self.at = signum, at

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == self.at:
            os.kill(os.getpid(), self.signum)


def _fit(tmp_path, *callbacks: pl.Callback) -> pl.Trainer:
    trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[CheckpointOnInterrupt(), *callbacks])
    data = SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=256, batch_size=16)
    trainer.fit(RegressionModule(SimpleModel(4, 2)), datamodule=data)
    return trainer


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_step_finishes_the_step_saves_and_restores_handlers(signum, tmp_path, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    trainer = quiet_trainer(
        tmp_path, max_epochs=3, callbacks=[CheckpointOnInterrupt(), _SignalDuringStep(signum, 5)]
    )
    data = SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=256, batch_size=16)
    with pytest.raises(SIGTERMException):
        trainer.fit(RegressionModule(SimpleModel(4, 2)), datamodule=data)
    assert {s: signal.getsignal(s) for s in before} == before
    assert stop_exit_code(trainer) == 128 + signum  # on the trainer's state, not in a module global
    trainer.validate(RegressionModule(SimpleModel(4, 2)), datamodule=data)
    assert stop_exit_code(trainer) is None  # a later run of the same trainer starts clean
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 6  # the step that was running when the signal came completed
    batches = ckpt["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert batches["completed"] == batches["ready"] == 6
    err = capsys.readouterr().err
    assert f"lit-gpu: stopped by {signum.name} at global step 6 (epoch 1 of 3); saved " in err


def test_a_finished_fit_leaves_signal_handlers_as_they_were(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    trainer = _fit(tmp_path)
    assert trainer.global_step == 48
    assert {s: signal.getsignal(s) for s in before} == before
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()


class _SignalDuringPredict(pl.Callback):
    def on_predict_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if batch_idx == 2:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_during_predict_stops_it_and_says_so(tmp_path, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    trainer = quiet_trainer(tmp_path, callbacks=[CheckpointOnInterrupt(), _SignalDuringPredict()])
    data = SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=256, batch_size=16)
    with pytest.raises(SystemExit):  # Lightning's KeyboardInterrupt shutdown; the predict loop never checks
        trainer.predict(RegressionModule(SimpleModel(4, 2)), datamodule=data)
    assert stop_exit_code(trainer) == 143
    assert {s: signal.getsignal(s) for s in before} == before
    assert "lit-gpu: stopped by SIGTERM during predict; nothing to save" in capsys.readouterr().err
