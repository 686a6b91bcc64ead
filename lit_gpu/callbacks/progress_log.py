"""Progress a person can follow in a batch job's log (SLURM, nohup, CI, ``| tee``): plain lines, no bar.

When the output is not a terminal (or ``TERM=dumb``), ``lit-gpu`` replaces the live bar by
:class:`ProgressLog`: one line every ``--progress_interval`` seconds (30 by default; ``0``: epoch ends
only) and one at each epoch end, on global rank zero only, flushed::

    lit-gpu: run runs/lit_gpu/version_0; resume: lit-gpu fit --config configs/simple.yaml --ckpt_path \
        runs/lit_gpu/version_0/checkpoints/last.ckpt
    fit epoch 1/2 batch 20/32 step 51 (54%) train/loss_step=0.009493 val/loss=0.03673 | 889 samples/s \
        | 0:00:04 ETA 0:00:03
    fit epoch 1/2 end batch 32/32 step 63 (67%) train/loss_step=0.00293 val/loss=0.003 | 981 samples/s \
        | 0:00:05 ETA 0:00:02
    lit-gpu: fit done in 0:00:08: train/loss=0.002945 val/loss=0.002561; checkpoint runs/lit_gpu/version_0/...

``--progress_format json`` writes the same as one JSON object a line (``{"event": "progress", ...}``).
Under a sweep each line carries the trial's number (``LIT_GPU_TRIAL`` or the ``trial`` argument).

Cost per step: two integer compares and a ``time.monotonic()`` call in ``on_train_batch_end``; the
metrics (``.item()`` on the device) are read only when a line is written.

What the numbers mean (docs/runs.md): ``epoch 1/2`` is Lightning's 0-based epoch of the last one, as the bar's
``Epoch 1/2``; ``batch`` counts the batches of the current epoch; ``step`` is metrics.csv's step of the last
training step; the percent and the ETA the
whole run (a resumed run counts what it did before the stop), ``samples/s`` the samples (a partial last
batch counts its own size) of all processes since the line before, over the time spent training (a fit's
validation left out). Metrics keep the names they were
logged under (``train/loss_step``: the last step's value; ``train/loss``: the epoch's mean). In JSON,
values that are not finite numbers are written as the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"``: every line is strict JSON.

This room decides when a line is due and counts what it reports; the words of a line and how it is
written (text or JSON) are in :mod:`lit_gpu.callbacks.progress_lines`.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Literal, TextIO

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.utilities.data import extract_batch_size
from typing_extensions import override

from lit_gpu import messages, numbering
from lit_gpu.callbacks.progress_lines import (
    Point,
    end_line,
    point_line,
    resume_command,
    scalars,
    start_line,
    write_line,
)
from lit_gpu.resume.state import finished_line

__all__ = ["DEFAULT_INTERVAL", "TRIAL_ENV", "ProgressLog", "live_bar_fits", "resume_command"]

DEFAULT_INTERVAL = 30.0  # seconds between progress lines
TRIAL_ENV = "LIT_GPU_TRIAL"  # set by a sweep: each line carries the trial's number
_STAGES = {"validate": "validate", "test": "test", "predict": "predict"}


def live_bar_fits(stream: TextIO | None = None) -> bool:
    """Whether a live (redrawn) bar suits ``stream`` (stdout): a terminal, and ``TERM`` is not dumb."""
    stream = sys.stdout if stream is None else stream
    if os.environ.get("TERM", "") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def _batch_size(batch: Any) -> int:
    try:
        return extract_batch_size(batch)
    except Exception:  # noqa: BLE001 - a batch without tensors: no samples/s
        return 0


class ProgressLog(ProgressBar):
    """Plain progress lines for logs: stage, epoch/total, step/total, percent, metrics, samples/s, ETA.

    A :class:`~lightning.pytorch.callbacks.ProgressBar` (so Lightning adds no bar of its own, and
    other ranks than global zero are disabled by Lightning); usable with any Trainer.

    Args:
        interval: Seconds between progress lines; ``0``: a line at each epoch end only.
        format: ``"text"`` (one short line) or ``"json"`` (one JSON object a line).
        trial: Sweep trial number put in every line; ``None``: ``$LIT_GPU_TRIAL`` if set.
        command: The command line (after ``lit-gpu``) of this run, for the resume command of the start line.
        stream: Where lines go (default: ``sys.stdout`` at the time of writing).
    """

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        format: Literal["text", "json"] = "text",  # noqa: A002 - the flag's name
        trial: int | None = None,
        command: list[str] | None = None,
        stream: TextIO | None = None,
    ) -> None:
        super().__init__()
        if interval < 0:
            raise ValueError(f"interval must be >= 0 seconds, got {interval}")
        if format not in ("text", "json"):
            raise ValueError(f"format must be 'text' or 'json', got {format!r}")
        self.interval = float(interval)
        self.format = format
        env_trial = os.environ.get(TRIAL_ENV, "").strip()
        ok = env_trial.isascii() and env_trial.isdigit() and len(env_trial) <= 18  # an int, not a 10**5000
        self.trial = trial if trial is not None else (int(env_trial) if ok else None)
        self.command = list(command) if command is not None else None
        self.stream = stream
        self._enabled = True
        self._start = 0.0  # wall clock of the command's start (fit, validate, ...)
        self._due = math.inf  # monotonic time of the next interval line
        self._loop_start = 0.0
        self._last_time = 0.0
        self._last_batches = 0
        self._batches = 0  # batches done in the current loop (all epochs, for fit)
        self._rate = 0.0
        self._step = 0  # batches done in this epoch
        self._last_batch: Any = None
        # samples: a fit counts ``batches x full - short`` (sizes read at a loop's first batch and at
        # each epoch's last one only); an evaluation command adds each batch's size
        self._full = 0  # samples of a full batch
        self._short = 0  # samples the partial last batches lacked
        self._samples = 0  # samples done (evaluation commands)
        self._last_samples = 0
        self._size_check = 1  # the next batch (1-based, in the epoch) whose size is read
        self._epoch_batches = 0
        self._val_seconds = 0.0  # seconds fit's validation took since the last line (not training time)
        self._val_start: float | None = None

    # ---- ProgressBar interface ----------------------------------------------------------------
    @property
    def is_enabled(self) -> bool:
        return self._enabled

    @property
    def is_disabled(self) -> bool:
        return not self._enabled

    @override
    def disable(self) -> None:
        self._enabled = False

    @override
    def enable(self) -> None:
        self._enabled = True

    # ---- writing -------------------------------------------------------------------------------------
    def _write(self, event: dict[str, Any], text: str) -> None:
        if self._enabled:
            write_line(event, text, format=self.format, trial=self.trial, stream=self.stream or sys.stdout)

    def _metrics(self, trainer: pl.Trainer) -> dict[str, float]:
        return scalars(trainer.progress_bar_metrics)  # the bar's metrics; read (synced) only here

    def _tell(self, event: dict[str, Any], text: str) -> None:
        """A start or end line: ``lit-gpu: ...`` in text, an event in JSON."""
        self._write(event, messages.PREFIX + text)

    # ---- start and end -----------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)  # disables every rank but global zero
        self._start = time.monotonic()

    def _folder(self, trainer: pl.Trainer) -> str | None:
        logger = trainer.logger
        folder = getattr(logger, "log_dir", None) if logger is not None else None
        return str(folder) if folder else None

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        folder = self._folder(trainer)
        checkpoint = trainer.checkpoint_callback
        dirpath = getattr(checkpoint, "dirpath", None)
        saves = dirpath and getattr(checkpoint, "save_last", None) and not trainer.fast_dev_run
        last = os.path.join(dirpath, "last.ckpt") if saves else None
        command = resume_command(self.command, last) if self.command is not None and last else None
        self._batches = 0  # none trained yet: a resumed fit that trains none may be of a finished run
        self._tell(*start_line("fit", folder, folder or trainer.default_root_dir, command))

    def start_eval_command(self, trainer: pl.Trainer, stage: str) -> None:
        """The start line of a validate/test/predict command (not of fit's validation)."""
        folder = self._folder(trainer)
        self._tell(*start_line(stage, folder, folder or trainer.default_root_dir, None))

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end(trainer, "fit")

    def count_batch(self) -> None:  # one training batch done, for RunLines (no bar to call the hooks)
        self._batches += 1

    def _end(self, trainer: pl.Trainer, stage: str) -> None:
        finished = finished_line(trainer) if stage == "fit" and not self._batches else None
        if finished is not None:  # resumed a run at its max_epochs/max_steps: not "fit done ... no metrics"
            return self._tell({"event": "end", "stage": stage, "nothing_trained": True}, finished)
        wall = time.monotonic() - self._start
        metrics = {
            k: v
            for k, v in scalars(trainer.callback_metrics).items()
            if not k.endswith(("_step", "_epoch")) and k != "train/lr"
        }
        checkpoint = trainer.checkpoint_callback if stage == "fit" else None
        path = getattr(checkpoint, "last_model_path", "") or getattr(checkpoint, "best_model_path", "")
        best = getattr(checkpoint, "best_model_path", "") if checkpoint is not None else ""
        self._tell(*end_line(stage, wall, metrics, path, best))

    # ---- progress lines -------------------------------------------------------------------------------
    def _loop_begins(self) -> None:
        now = time.monotonic()
        self._loop_start = self._last_time = now
        self._batches = self._last_batches = 0
        self._full = self._short = self._samples = self._last_samples = 0
        self._size_check = 1
        self._rate = 0.0
        self._val_seconds, self._val_start = 0.0, None
        self._due = now + self.interval if self.interval > 0 else math.inf

    def _samples_done(self, stage: str) -> int:
        return self._batches * self._full - self._short if stage == "fit" else self._samples

    def _samples_per_s(self, trainer: pl.Trainer, stage: str, now: float) -> float:
        """Samples per second (all processes) since the last line."""
        seconds = now - self._last_time - self._val_seconds  # training time: fit's validation left out
        self._val_seconds = 0.0
        batches = self._batches - self._last_batches
        samples = self._samples_done(stage)
        if seconds > 0 and batches > 0:
            self._rate = (samples - self._last_samples) * trainer.world_size / seconds
        self._last_time, self._last_batches, self._last_samples = now, self._batches, samples
        return self._rate

    def _line(
        self,
        trainer: pl.Trainer,
        stage: str,
        batch: Any,
        steps: int | float,
        *,
        epoch_end: bool = False,
    ) -> None:
        now = time.monotonic()
        rate = self._samples_per_s(trainer, stage, now)
        elapsed = now - self._loop_start
        epoch: tuple[int, int | None] | None = None
        done, total, step, logged = self._batches, steps, self._batches, None
        if stage == "fit":  # numbered as the bar and metrics.csv: epoch and step from 0 (messages.py)
            epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
            epoch, step, logged = (trainer.current_epoch, epochs), self._step, numbering.logged_step(trainer)
            done, total = self._run_progress(trainer, steps)
        percent = 100.0 * done / total if math.isfinite(total) and total > 0 else None
        # the rate of this process's own batches; the work left counts the whole run
        eta = elapsed * (total - done) / self._batches if percent is not None and self._batches else math.nan
        self._due = now + self.interval if self.interval > 0 else math.inf
        point = Point(stage, epoch, epoch_end, step, steps, logged, trainer.global_step, percent)
        self._write(*point_line(point, self._metrics(trainer), rate, elapsed, eta))

    def _run_progress(self, trainer: pl.Trainer, per_epoch: int | float) -> tuple[float, float]:
        """Training batches done and in the whole run (epochs x batches, or max_steps), counted from the
        run's first step: a resumed fit counts the batches done before it was stopped."""
        done, total = math.nan, math.inf
        epochs = trainer.max_epochs
        if epochs is not None and epochs > 0 and math.isfinite(per_epoch):
            done, total = trainer.current_epoch * per_epoch + self._step, epochs * per_epoch
        if trainer.max_steps is not None and trainer.max_steps > 0:
            accumulate = trainer.accumulate_grad_batches
            if trainer.max_steps * accumulate < total:
                done, total = trainer.global_step * accumulate, trainer.max_steps * accumulate
        return done, total

    # fit
    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._loop_begins()

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        total = self.total_train_batches
        self._epoch_batches = int(total) if math.isfinite(total) else 0
        if self._full:  # sizes known: read the epoch's last batch only
            self._size_check = self._epoch_batches or math.inf

    def _read_size(self, batch: Any) -> None:
        """At a loop's first batch: the full batch size; at an epoch's last: how many samples it lacks."""
        size = _batch_size(batch)
        if not self._full:
            self._full = size
        elif self._step == self._epoch_batches:
            self._short += max(0, self._full - size)
        self._size_check = self._epoch_batches if self._step < self._epoch_batches else math.inf

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        self._step = batch_idx + 1
        self._last_batch = batch
        if self._step >= self._size_check:
            self._read_size(batch)
        if time.monotonic() >= self._due and self._step < self.total_train_batches:  # else the epoch-end line
            self._line(trainer, "fit", batch, self.total_train_batches)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._batches:
            self._line(trainer, "fit", self._last_batch, self.total_train_batches, epoch_end=True)

    # validate / test / predict commands (validation inside fit counts in fit's lines)
    def _eval_begins(self, trainer: pl.Trainer, stage: str) -> None:
        if trainer.state.fn == stage:
            self.start_eval_command(trainer, stage)
            self._loop_begins()
            loop = {"validate": trainer.validate_loop, "test": trainer.test_loop}.get(stage)
            if loop is not None:  # no results table in a log: the end line holds the metrics
                loop.verbose = False

    def _eval_batch(self, trainer: pl.Trainer, stage: str, batch: Any, total: float) -> None:
        if trainer.state.fn != stage:
            return
        self._batches += 1
        self._samples += _batch_size(batch)
        self._last_batch = batch
        if time.monotonic() >= self._due:
            self._line(trainer, stage, batch, total)

    def _eval_ends(self, trainer: pl.Trainer, stage: str) -> None:
        if trainer.state.fn != stage:
            return
        if self._batches:
            self._line(trainer, stage, self._last_batch, self._eval_total(trainer, stage), epoch_end=True)
        self._end(trainer, stage)

    def _eval_total(self, trainer: pl.Trainer, stage: str) -> float:
        totals = {
            "validate": trainer.num_val_batches,
            "test": trainer.num_test_batches,
            "predict": trainer.num_predict_batches,
        }[stage]
        return float(sum(totals)) if totals else math.inf

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "fit":  # fit's validation: its time is not training time (samples/s)
            self._val_start = time.monotonic()
        self._eval_begins(trainer, "validate")

    @override
    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._eval_batch(trainer, "validate", batch, self._eval_total(trainer, "validate"))

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._val_start is not None:
            self._val_seconds += time.monotonic() - self._val_start
            self._val_start = None
        self._eval_ends(trainer, "validate")

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_begins(trainer, "test")

    @override
    def on_test_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._eval_batch(trainer, "test", batch, self._eval_total(trainer, "test"))

    @override
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_ends(trainer, "test")

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_begins(trainer, "predict")

    @override
    def on_predict_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._eval_batch(trainer, "predict", batch, self._eval_total(trainer, "predict"))

    @override
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_ends(trainer, "predict")
