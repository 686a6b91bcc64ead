"""The progress display: the live bar on a terminal, plain lines (ProgressLog) anywhere else."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import sys

import lightning.pytorch as pl
import pytest
from lightning.pytorch.callbacks import ModelSummary, RichModelSummary

from lit_gpu import messages
from lit_gpu.callbacks.progress import (
    LitProgressBar,
    ProgressLog,
    default_progress_bar,
    live_bar_fits,
    resume_command,
    use_progress_log,
)
from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from tests.helpers.trainers import quiet_trainer


def test_a_live_bar_only_on_a_terminal_that_is_not_dumb(monkeypatch):
    leader, follower = pty.openpty()
    try:
        with os.fdopen(os.dup(follower), "w") as terminal:
            monkeypatch.setenv("TERM", "xterm-256color")
            assert live_bar_fits(terminal)
            monkeypatch.setenv("TERM", "dumb")
            assert not live_bar_fits(terminal)
    finally:
        os.close(leader)
        os.close(follower)
    monkeypatch.delenv("TERM")
    assert not live_bar_fits(io.StringIO())  # a file, a pipe, a captured stream


@pytest.mark.parametrize(
    "terminal, fmt, expected",
    [(True, "text", LitProgressBar), (False, "text", ProgressLog), (True, "json", ProgressLog)],
)
def test_lines_replace_the_default_bar_off_a_terminal_or_for_json(terminal, fmt, expected, monkeypatch):
    monkeypatch.setattr("lit_gpu.callbacks.progress.live_bar_fits", lambda: terminal)
    trainer = quiet_trainer(
        enable_progress_bar=True, enable_model_summary=True, callbacks=[default_progress_bar()]
    )
    use_progress_log(trainer, interval=5, format=fmt, command=["fit"])
    assert isinstance(trainer.progress_bar_callback, expected)
    summaries = [type(c) for c in trainer.callbacks if isinstance(c, ModelSummary)]
    assert summaries == [ModelSummary if expected is ProgressLog else RichModelSummary]  # no box drawing


def test_a_users_own_bar_is_kept(monkeypatch):
    monkeypatch.setattr("lit_gpu.callbacks.progress.live_bar_fits", lambda: False)
    own = LitProgressBar()
    trainer = quiet_trainer(enable_progress_bar=True, callbacks=[own])
    assert use_progress_log(trainer) is None and trainer.progress_bar_callback is own


def test_resume_command_replaces_the_ckpt_path():
    argv = ["fit", "--config", "a b.yaml", "--ckpt_path", "last", "--ckpt_path=x", "--new_run", "true"]
    assert (
        resume_command(argv, "runs/v/last.ckpt")
        == "lit-gpu fit --config 'a b.yaml' --ckpt_path runs/v/last.ckpt"
    )


def test_the_live_bar_shows_the_runs_version_and_samples_per_second(tmp_path, capsys):
    from lit_gpu.run import loggers

    bar = LitProgressBar()
    folder = loggers.RunFolder(tmp_path)
    trainer = quiet_trainer(tmp_path, enable_progress_bar=True, callbacks=[bar], logger=loggers.make_loggers(
        ["csv", "tensorboard"], folder), max_epochs=1, limit_val_batches=0)  # fmt: skip
    trainer.fit(RegressionModule(SimpleModel(10, 10)), SyntheticRegressionDataModule(num_samples=640))
    metrics = bar.get_metrics(trainer, trainer.lightning_module)
    assert metrics["version"] == "0" and "v_num" not in metrics  # shown as "version: 0", not 0.000
    assert bar.samples_per_s > 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("lit-gpu: ")]
    assert lines[0].startswith(f"lit-gpu: run {tmp_path}") and lines[-1].startswith("lit-gpu: fit done in ")
    columns = bar.configure_columns(trainer)
    task = type("Task", (), {"id": bar.train_progress_bar_id})()
    assert columns[-1].render(task).plain.endswith(" samples/s")


def test_the_live_bar_and_the_lines_number_epochs_alike(tmp_path):
    """Lightning's bar says ``Epoch 1/1`` (0-based, of the last index); lit-gpu's lines say ``epoch 1/1``."""

    screen = io.StringIO()
    bar = LitProgressBar(console_kwargs={"file": screen, "force_terminal": True, "width": 200})
    trainer = quiet_trainer(
        tmp_path, enable_progress_bar=True, callbacks=[bar], max_epochs=2, limit_val_batches=0
    )
    trainer.fit(RegressionModule(SimpleModel(10, 10)), SyntheticRegressionDataModule(num_samples=128))
    shown = set(re.findall(r"Epoch (\d+/\d+)", screen.getvalue()))
    assert shown == {"0/1", "1/1"}, screen.getvalue()[-500:]
    assert {messages.epoch_point(e, trainer.max_epochs).removeprefix("epoch ") for e in (0, 1)} == shown


def test_interval_lines_are_written_only_when_due(monkeypatch):
    out = io.StringIO()
    clock = iter(range(0, 10_000, 10))  # every call to time.monotonic: 10 s later
    monkeypatch.setattr("lit_gpu.callbacks.progress.time.monotonic", lambda: next(clock))
    log = ProgressLog(interval=35, stream=out)
    trainer = quiet_trainer(enable_progress_bar=True, callbacks=[log], max_epochs=2, limit_val_batches=0)
    trainer.fit(RegressionModule(SimpleModel(10, 10)), SyntheticRegressionDataModule(num_samples=640))
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("fit ")]
    ends = [ln for ln in lines if " end " in ln]
    assert len(ends) == 2 and 2 <= len(lines) - len(ends) <= 10  # 20 batches, one line about every 4th
    assert all(ord(c) < 128 for c in out.getvalue())
    assert sys.stdout is not out


class _Tick(pl.Callback):
    """One second of the fake clock a training or test batch (runs before ProgressLog reads it)."""

    def __init__(self, now: list[float]) -> None:
        self.now = now

    def on_train_batch_end(self, *args) -> None:
        self.now[0] += 1.0

    def on_test_batch_end(self, *args) -> None:
        self.now[0] += 1.0

    def on_validation_batch_end(self, *args) -> None:
        self.now[0] += 10.0


class _OddValues(RegressionModule):
    """Shows a NaN and an infinity in the progress-bar metrics."""

    def training_step(self, batch, batch_idx):
        self.log("odd/nan", float("nan"), prog_bar=True)
        self.log("odd/inf", float("-inf"), prog_bar=True)
        return super().training_step(batch, batch_idx)


def _refuse(constant: str) -> None:
    raise ValueError(f"not strict JSON: {constant}")


def test_samples_per_second_counts_partial_batches_and_json_lines_are_strict(monkeypatch, capsys):
    """650 training samples in batches of 64 (10 full, one of 10) and 162 test samples (64, 64, 34), one
    fake second a batch: samples/s is samples over seconds, not batches times the last batch's size."""
    now = [0.0]
    monkeypatch.setattr("lit_gpu.callbacks.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    log = ProgressLog(interval=0, format="json", stream=out)
    trainer = quiet_trainer(
        enable_progress_bar=True, callbacks=[_Tick(now), log], max_epochs=2, limit_val_batches=0
    )
    model, data = _OddValues(SimpleModel(10, 10)), SyntheticRegressionDataModule(num_samples=650)
    trainer.fit(model, data)
    trainer.test(model, data)
    events = [json.loads(line, parse_constant=_refuse) for line in out.getvalue().splitlines()]
    rates = [(e["stage"], e["samples_per_s"]) for e in events if e["event"] == "epoch_end"]
    assert rates == [
        ("fit", pytest.approx(650 / 11, rel=0.01)),
        ("fit", pytest.approx(650 / 11, rel=0.01)),
        ("test", pytest.approx(162 / 3, rel=0.01)),
    ]
    fit_end = [e for e in events if e["event"] == "epoch_end"][1]
    assert fit_end["percent"] == 100.0 and fit_end["eta_s"] == 0.0
    assert fit_end["metrics"]["odd/nan"] == "NaN" and fit_end["metrics"]["odd/inf"] == "-Infinity"
    printed = capsys.readouterr().out
    assert not re.search("[\u2500-\u257f]", printed)  # no results table: the end line holds the metrics


def test_the_epoch_end_rate_leaves_out_the_fits_validation(monkeypatch):
    """Each epoch: 11 training batches (one fake second each), then 2 validation batches of 10 s each:
    the epoch-end line's samples/s is the training's, 650 / 11, not 650 / 31."""
    now = [0.0]
    monkeypatch.setattr("lit_gpu.callbacks.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    log = ProgressLog(interval=0, format="json", stream=out)
    trainer = quiet_trainer(
        enable_progress_bar=True, callbacks=[_Tick(now), log], max_epochs=2, limit_val_batches=2
    )
    trainer.fit(RegressionModule(SimpleModel(10, 10)), SyntheticRegressionDataModule(num_samples=650))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    rates = [e["samples_per_s"] for e in events if e["event"] == "epoch_end"]
    assert rates == [pytest.approx(650 / 11, rel=0.01)] * 2
    assert now[0] >= 2 * (11 + 20)  # the validations did take their time
