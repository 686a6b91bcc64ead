"""Checkpoints under gradient accumulation only at optimizer step boundaries: resumes are bit-exact.

A checkpoint holds no accumulated gradients: one written between the micro-batches of an optimizer step
resumes without them (issue 57: ``accumulate_grad_batches=2``, ``last.ckpt`` every 3 steps, batch 7's
gradient lost). Each test compares a stopped and resumed fit with one uninterrupted reference fit:
weights, optimizer state and metrics.csv bit-equal. 160 samples, batch 16: 10 batches an epoch, 2 epochs.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from lit_gpu.callbacks import CheckpointOnInterrupt, FreshLastCheckpoint, RNGStateCallback
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.nets import SimpleModel
from lit_gpu.resume.state import LoggingStateCallback
from tests.helpers.resume import NoisyRegression
from tests.helpers.trainers import quiet_trainer

BATCHES = 10  # an epoch


class SignalAtBatch(pl.Callback):
    """Sends its own process SIGTERM in training batch ``batch`` (counted from 1 over the fit), at its
    start (the signal lands during the batch) or at its end."""

    def __init__(self, batch: int, at: str = "end") -> None:
        self.batch, self.at, self.seen = batch, at, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen += 1
        if self.at == "start" and self.seen == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.at == "end" and self.seen == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)


class CrashAtBatch(pl.Callback):
    """Ends the fit with an error after training batch ``batch`` (before that batch's checkpoint saves)."""

    def __init__(self, batch: int) -> None:
        self.batch, self.seen = batch, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen += 1
        if self.seen == self.batch:
            raise RuntimeError("crash")


class SavedAt(pl.Callback):
    """Records ``(file name, the epoch's batches done, global step)`` of every checkpoint written."""

    def __init__(self) -> None:
        self.points: list[tuple[str, int, int]] = []

    def setup(self, trainer, pl_module, stage) -> None:
        io = trainer.strategy.checkpoint_io
        save = io.save_checkpoint

        def recorded(checkpoint, path, *args, **kwargs):
            current = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
            self.points.append((Path(path).name, current["processed"], checkpoint["global_step"]))
            return save(checkpoint, path, *args, **kwargs)

        io.save_checkpoint = recorded

    def last(self) -> list[tuple[int, int]]:
        return [(done, step) for name, done, step in self.points if name.startswith("last")]


def _fit(
    root: Path,
    version: int,
    *,
    accumulate: int,
    extra: tuple[pl.Callback, ...] = (),
    resume: bool | Path = False,
    every_n_train_steps: int = 3,
    val_check_interval: int | None = None,
    top_k: int = 1,
    monitor: str | None = None,
    cli_callbacks: bool = False,
) -> pl.LightningModule:
    pl.seed_everything(42)
    if cli_callbacks:  # the lit-gpu CLI's own list: its lean step and batch paths too
        from lit_gpu.cli.lightning_cli import DEFAULT_CALLBACKS

        extra = (*extra, *(cls() for cls in DEFAULT_CALLBACKS if cls is not RNGStateCallback))
    else:
        extra = (*extra, LoggingStateCallback(), CheckpointOnInterrupt())
    callbacks = [
        *extra,
        RNGStateCallback(),
        FreshLastCheckpoint(
            dirpath=root / "ckpt",
            save_last=True,
            save_top_k=top_k,
            monitor=monitor,
            every_n_train_steps=every_n_train_steps,
        ),
    ]
    trainer = quiet_trainer(
        root,
        max_epochs=2,
        limit_val_batches=1,
        accumulate_grad_batches=accumulate,
        log_every_n_steps=1,
        val_check_interval=val_check_interval,
        enable_checkpointing=True,
        deterministic=True,
        callbacks=callbacks,
        logger=CSVLogger(root, name="logs", version=version),
    )
    model = NoisyRegression(SimpleModel(4, 4), optimizer=lambda p: torch.optim.Adam(p, lr=0.01))
    data = SyntheticRegressionDataModule(in_features=4, out_features=4, num_samples=160, batch_size=16)
    ckpt = str(resume if isinstance(resume, Path) else root / "ckpt" / "last.ckpt") if resume else None
    try:
        trainer.fit(model, datamodule=data, ckpt_path=ckpt)
    except (RuntimeError, SystemExit) as err:
        if "crash" not in str(err) and not isinstance(err, SystemExit):
            raise
    return model


def _rows(root: Path, *versions: int) -> list[dict[str, str]]:
    """The metrics.csv rows of ``versions`` (a stopped fit, then its resume), each row's non-empty values."""
    rows: list[dict[str, str]] = []
    for version in versions:
        with open(root / "logs" / f"version_{version}" / "metrics.csv", newline="") as f:
            rows += [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]
    return rows


@pytest.fixture(scope="module", params=[2, 3])
def reference(request, tmp_path_factory) -> tuple[int, Path, pl.LightningModule]:
    root = tmp_path_factory.mktemp(f"reference{request.param}")
    return request.param, root, _fit(root, 0, accumulate=request.param)


def _assert_same_run(model: pl.LightningModule, ref: pl.LightningModule, root: Path, ref_root: Path) -> None:
    for (name, x), y in zip(model.state_dict().items(), ref.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    mine, theirs = model.trainer.optimizers[0].state_dict(), ref.trainer.optimizers[0].state_dict()
    for key, state in theirs["state"].items():
        for field, value in state.items():
            assert torch.equal(torch.as_tensor(mine["state"][key][field]), torch.as_tensor(value)), field
    assert _rows(root, 0, 1) == _rows(ref_root, 0)


def _stop_and_resume(tmp_path: Path, reference, batch: int, at: str) -> None:
    accumulate, ref_root, ref = reference
    _fit(tmp_path, 0, accumulate=accumulate, extra=(SignalAtBatch(batch, at),))
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    processed = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    assert processed % accumulate == 0 or processed == BATCHES  # a step boundary, not a micro-batch
    epochs, in_epoch = divmod(batch - 1, BATCHES)
    steps = epochs * -(-BATCHES // accumulate) + -(-(in_epoch + 1) // accumulate)  # the step it was in
    assert saved["global_step"] == steps
    _assert_same_run(_fit(tmp_path, 1, accumulate=accumulate, resume=True), ref, tmp_path, ref_root)


#: (batch the signal comes in, where): every micro-batch position of a step in epoch 2 (batches 11-20)
SAMPLE = [(13, "end"), (14, "start")]
POSITIONS = [(batch, at) for batch in range(12, 16) for at in ("start", "end")]


@pytest.mark.parametrize(("batch", "at"), SAMPLE)
def test_a_stop_at_any_micro_batch_resumes_exactly(tmp_path, reference, batch, at):
    _stop_and_resume(tmp_path, reference, batch, at)


@pytest.mark.full
@pytest.mark.parametrize(("batch", "at"), [p for p in POSITIONS if p not in SAMPLE])
def test_a_stop_at_every_micro_batch_resumes_exactly(tmp_path, reference, batch, at):
    _stop_and_resume(tmp_path, reference, batch, at)


def test_interval_saves_wait_for_the_step_and_a_crash_resumes_exactly(tmp_path, reference):
    """``last.ckpt`` every 3 steps: the issue's case (a crash after batch 7 with accumulation 2)."""
    accumulate, ref_root, ref = reference
    saved = SavedAt()
    _fit(
        tmp_path,
        0,
        accumulate=accumulate,
        extra=(saved, CrashAtBatch(3 * accumulate + 2)),
        monitor="val/loss",
    )
    assert saved.last() and all(p % accumulate == 0 or p == BATCHES for p, _ in saved.last())
    rows = _rows(tmp_path, 0)
    last = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    shutil.move(tmp_path / "logs" / "version_0", tmp_path / "crashed")
    (tmp_path / "logs" / "version_0").mkdir()
    with open(tmp_path / "logs" / "version_0" / "metrics.csv", "w", newline="") as f:  # the rows to its step
        kept = [r for r in rows if int(r["step"]) < last["global_step"]]
        writer = csv.DictWriter(f, fieldnames=sorted({k for r in kept for k in r}))
        writer.writeheader()
        writer.writerows(kept)
    _assert_same_run(_fit(tmp_path, 1, accumulate=accumulate, resume=True), ref, tmp_path, ref_root)


def test_a_validation_between_micro_batches_saves_last_at_the_next_step(tmp_path):
    """A validation every 3 batches under accumulation 2 falls between micro-batches: ``last.ckpt`` is
    written at the step's end, never there."""
    saved = SavedAt()
    _fit(tmp_path, 0, accumulate=2, extra=(saved,), every_n_train_steps=None, val_check_interval=3)
    # validations after batches 3, 6, 9 of each epoch: last.ckpt after 4, 6, 10 (the epoch's end)
    assert saved.last() == [(4, 2), (6, 3), (10, 5), (4, 7), (6, 8), (10, 10)]


def test_a_resume_from_a_checkpoint_between_micro_batches_says_so(tmp_path, capsys):
    """Lightning's own top-k file at such a validation holds 3 of 4 batches' steps: one line on resume."""
    saved = SavedAt()
    _fit(tmp_path, 0, accumulate=2, extra=(saved,), every_n_train_steps=None, val_check_interval=3, top_k=-1)
    between = [name for name, done, _ in saved.points if not name.startswith("last") and done % 2]
    capsys.readouterr()
    _fit(tmp_path, 1, accumulate=2, resume=tmp_path / "ckpt" / between[0], val_check_interval=3)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "micro-batches" in ln]
    assert lines == [
        "lit-gpu: resumed at epoch 0/1 batch 3/10, between the micro-batches of an optimizer step (1 of 2 "
        "accumulated): a checkpoint holds no accumulated gradients, so this run differs from an uninterrupted"
        " one (lit_gpu writes last.ckpt and a stop's checkpoint only at a step's end)"
    ]


class SignalInValidation(pl.Callback):
    """Sends its own process SIGTERM at the start of the fit's ``n``-th validation (not the sanity check)."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.seen += 1
            if self.seen == self.n:
                os.kill(os.getpid(), signal.SIGTERM)


def test_a_stop_during_a_validation_between_micro_batches_waits_for_the_step(tmp_path):
    """Validation every 3 batches, accumulation 2: a signal in the validation after batch 13 (mid-step) stops
    after batch 14, the step's end; the resume is exact."""
    ref = _fit(tmp_path / "ref", 0, accumulate=2, every_n_train_steps=None, val_check_interval=3)
    run = tmp_path / "run"
    _fit(run, 0, accumulate=2, every_n_train_steps=None, val_check_interval=3, extra=(SignalInValidation(4),))
    saved = torch.load(run / "ckpt" / "last.ckpt", weights_only=True)
    assert saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"] == 4
    model = _fit(run, 1, accumulate=2, every_n_train_steps=None, val_check_interval=3, resume=True)
    _assert_same_run(model, ref, run, tmp_path / "ref")


def test_with_the_clis_callbacks_a_stop_between_micro_batches_resumes_exactly(tmp_path):
    """The lit-gpu CLI's callbacks (its lean step and batch paths): the same stop, the same exact resume."""
    ref = _fit(tmp_path / "ref", 0, accumulate=2, cli_callbacks=True)
    run = tmp_path / "run"
    _fit(run, 0, accumulate=2, extra=(SignalAtBatch(13, "end"),), cli_callbacks=True)
    saved = torch.load(run / "ckpt" / "last.ckpt", weights_only=True)
    assert saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"] == 4
    model = _fit(run, 1, accumulate=2, resume=True, cli_callbacks=True)
    _assert_same_run(model, ref, run, tmp_path / "ref")
