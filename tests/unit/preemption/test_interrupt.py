"""CheckpointOnInterrupt on a plain Trainer: a signal mid-step stops at the step boundary and saves."""

from __future__ import annotations

import os
import signal

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lit_gpu.callbacks import CheckpointOnInterrupt
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.preemption import stop_exit_code
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
    assert f"lit-gpu: stopped by {signum.name} at step 5 (epoch 0/2 batch 6/16); saved " in err
    # a Trainer built in Python: no command line to repeat, but this run's own last.ckpt by path, not `last`
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert f"resume with: lit-gpu fit <same arguments> --ckpt_path {last}" in err


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


class _WorkerDeathAt(pl.Callback):
    """Raises torch's report of a DataLoader worker death at the start of the batch after step ``at``."""

    def __init__(self, at: int, text: str) -> None:
        self.at, self.text = at, text

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.at:
            raise RuntimeError(self.text)


@pytest.mark.parametrize(
    "text, code",
    [
        ("DataLoader worker (pid 4242) is killed by signal: Terminated. ", 143),
        ("DataLoader worker (pid 4242) is killed by signal: Interrupt. ", 130),
    ],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_worker_killed_by_the_jobs_signal_is_a_stop_at_the_last_finished_step(text, code, tmp_path, capsys):
    from lit_gpu.preemption import signal_stop_code

    trainer = quiet_trainer(
        tmp_path, max_epochs=3, callbacks=[CheckpointOnInterrupt(), _WorkerDeathAt(5, text)]
    )
    data = SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=256, batch_size=16)
    with pytest.raises(RuntimeError) as info:
        trainer.fit(RegressionModule(SimpleModel(4, 2)), datamodule=data)
    assert signal_stop_code(trainer, info.value) == code
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 5
    err = capsys.readouterr().err
    assert (
        f"lit-gpu: stopped by {signal.Signals(code - 128).name} at step 4 (epoch 0/2 batch 5/16); "
        "saved " in err
    )


def test_a_worker_death_of_another_cause_stays_a_crash(tmp_path, monkeypatch, capsys):
    from lit_gpu import preemption as interrupt
    from lit_gpu.preemption import signal_stop_code

    monkeypatch.setattr(interrupt, "WORKER_DEATH_GRACE_S", 0.05)  # no job signal comes
    for text in (
        "DataLoader worker (pid 1) is killed by signal: Killed. ",
        "DataLoader worker (pid(s) 1) exited unexpectedly",
    ):
        trainer = quiet_trainer(
            tmp_path, max_epochs=3, callbacks=[CheckpointOnInterrupt(), _WorkerDeathAt(5, text)]
        )
        data = SyntheticRegressionDataModule(in_features=4, out_features=2, num_samples=256, batch_size=16)
        with pytest.raises(RuntimeError) as info:
            trainer.fit(RegressionModule(SimpleModel(4, 2)), datamodule=data)
        assert signal_stop_code(trainer, info.value) is None
        assert not (tmp_path / "checkpoints" / "last.ckpt").exists()
        assert "stopped by" not in capsys.readouterr().err


def test_torchs_sigchld_report_of_a_worker_killed_by_sigterm_becomes_the_stop_signal():
    """The SIGCHLD guard: torch's check raises wherever the step is; a job signal's death is recorded."""
    callback = CheckpointOnInterrupt()
    callback._active = True

    def torch_handler(text):
        def handler(signum, frame):
            raise RuntimeError(text)

        return handler

    callback._sigchld_inner = torch_handler("DataLoader worker (pid 7) is killed by signal: Terminated. ")
    callback._on_sigchld(signal.SIGCHLD, None)  # no raise
    assert callback._signal == signal.SIGTERM
    callback._signal = None
    callback._sigchld_inner = torch_handler("DataLoader worker (pid 7) is killed by signal: Killed. ")
    with pytest.raises(RuntimeError, match="Killed"):  # the OOM killer's SIGKILL stays a crash
        callback._on_sigchld(signal.SIGCHLD, None)
    assert callback._signal is None
