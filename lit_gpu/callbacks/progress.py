"""The progress bar ``lit-gpu`` shows: Lightning's Rich bar, redrawn a few times a second.

Lightning 2.6's default ``RichProgressBar(refresh_rate=100)`` starts a thread that rebuilds the
whole display 100 times per second (also when stdout is a file), and on every training batch it
collects the logged metrics again (``get_metrics``: a dict rebuild and a ``.item()`` per value).
Both compete with the training loop; on a small CPU model that was several percent of the run
(docs/benchmarks.md, "lit_gpu overhead"). :class:`LitProgressBar` redraws
:data:`REFRESHES_PER_SECOND` times a second and updates the training bar at most that often; a
person sees the same bar.

Plain lines, for a person following a batch job's log (SLURM, nohup, CI, ``| tee``): when the output is not
a terminal (or ``TERM=dumb``), ``lit-gpu`` replaces the live bar by :class:`ProgressLog`: one line every
``--progress_interval`` seconds (30 by default; ``0``: epoch ends only) and one at each epoch end, on global
rank zero only, flushed::

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
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from typing import Any, Literal, NamedTuple, TextIO

import lightning.pytorch as pl
from lightning.pytorch.callbacks import (
    ModelSummary,
    ProgressBar,
    RichModelSummary,
    RichProgressBar,
    TQDMProgressBar,
)
from lightning.pytorch.utilities.data import extract_batch_size
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.messages import resume_command, shown
from lit_gpu.preemption import remember_command
from lit_gpu.resume.state import finished_line
from lit_gpu.run.layout import version_number

# ---- what a line says and how it is written (text or strict JSON) -------------------------------
PROGRESS_RUN = "run {folder}"
PROGRESS_RESUME = "; resume: {command}"
PROGRESS_END = "{stage} done in {wall}: {metrics}"
PROGRESS_END_CHECKPOINT = "; checkpoint {path}"
PROGRESS_END_BEST = " (best: {path})"


def clock(seconds: float) -> str:
    """``H:MM:SS``; ``?`` for a time not known (not finite, negative)."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def number(value: float) -> str:
    """A metric's value in a text line: four significant digits."""
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"


def _strict(value: Any) -> Any:
    """``value`` with every non-finite float as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(item) for item in value]
    return value


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics that are numbers, as floats (one ``.item()`` each where they are tensors)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        try:
            out[key] = float(value)  # progress_bar_metrics are floats already; one .item() otherwise
        except (TypeError, ValueError, RuntimeError):
            continue
    return out


def write_line(
    event: dict[str, Any],
    text: str,
    *,
    format: Literal["text", "json"],  # noqa: A002 - the flag's name
    trial: int | None,
    stream: TextIO,
) -> None:
    """Print one line: ``text`` (escaped) or ``event`` as strict JSON, with the sweep trial's number."""
    if trial is not None:
        event = {"trial": trial, **event}
        prefix = messages.PREFIX if text.startswith(messages.PREFIX) else ""
        text = f"{prefix}trial {trial} {text.removeprefix(prefix)}"
    print(  # JSON escapes every control and non-ASCII character (ensure_ascii); text: one_line
        json.dumps(_strict(event), separators=(",", ":"), allow_nan=False, ensure_ascii=True)
        if format == "json"
        else messages.one_line(text),
        file=stream,
        flush=True,
    )


def start_line(stage: str, folder: str | None, shown_folder: Any, resume: str | None) -> tuple[dict, str]:
    """The start line of a command: its run folder and, for a fit, the command that resumes it."""
    text = PROGRESS_RUN.format(folder=shown(shown_folder))
    event: dict[str, Any] = {"event": "start", "stage": stage, "folder": folder}
    if stage == "fit":
        event["resume"] = resume
    if resume:
        text += PROGRESS_RESUME.format(command=shown(resume, limit=messages.LINE_MAX_CHARS))
    return event, text


def end_line(
    stage: str, wall: float, metrics: dict[str, float], path: str, best: str
) -> tuple[dict[str, Any], str]:
    """The end line of a command: wall time, final metrics, the last (and best) checkpoint of a fit."""
    listed = " ".join(f"{shown(k)}={number(v)}" for k, v in metrics.items())
    text = PROGRESS_END.format(stage=stage, wall=clock(wall), metrics=listed or "no metrics logged")
    if path:
        text += PROGRESS_END_CHECKPOINT.format(path=shown(path))
        if best and best != path:
            text += PROGRESS_END_BEST.format(path=shown(best))
    event: dict[str, Any] = {"event": "end", "stage": stage, "wall_s": round(wall, 3), "metrics": metrics}
    event["checkpoint"] = path or None
    if best:
        event["best"] = best
    return event, text


class Point(NamedTuple):
    """Where a progress line stands: the stage, a fit's epoch (Lightning's 0-based index, of ``max_epochs``),
    the batches done in the epoch (or the evaluation) and how many there are, a fit's step as its loggers
    number it (metrics.csv's ``step``), the global step, and the run's percent done."""

    stage: str
    epoch: tuple[int, int | None] | None
    epoch_end: bool
    batch: int
    batches: int | float
    step: int | None
    global_step: int
    percent: float | None


def point_line(
    point: Point, metrics: dict[str, float], rate: float, elapsed: float, eta: float
) -> tuple[dict[str, Any], str]:
    """A progress line: stage, epoch/last, batch/total, step, percent, metrics, samples/s, elapsed and ETA."""
    event: dict[str, Any] = {"event": "epoch_end" if point.epoch_end else "progress", "stage": point.stage}
    parts = [point.stage]
    if point.epoch is not None:
        epoch, epochs = point.epoch
        event.update(epoch=epoch, epochs=epochs)
        parts.append(messages.epoch_point(epoch, epochs) + (" end" if point.epoch_end else ""))
    finite = math.isfinite(point.batches)
    batches = int(point.batches) if finite else None
    event.update(batch=point.batch, batches=batches, step=point.step, global_step=point.global_step)
    parts.append(f"batch {point.batch}/{batches if finite else '?'}")
    if point.step is not None:
        parts.append(f"step {point.step}")
    if point.percent is not None:
        parts.append(f"({point.percent:.0f}%)")
    parts += [f"{shown(k)}={number(v)}" for k, v in metrics.items()]
    parts += ["|", f"{rate:.0f} samples/s", "|", clock(elapsed), "ETA", clock(eta)]
    event.update(
        percent=None if point.percent is None else round(point.percent, 2),
        metrics=metrics,
        samples_per_s=round(rate, 2),
        elapsed_s=round(elapsed, 3),
        eta_s=None if math.isnan(eta) else round(eta, 3),
    )
    return event, " ".join(parts)


# ---- plain lines: when a line is due, what it counts ---------------------------------------------
DEFAULT_INTERVAL = 30.0  # seconds between progress lines
TRIAL_ENV = "LIT_GPU_TRIAL"  # set by a sweep: each line carries the trial's number


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
            epoch, step, logged = (trainer.current_epoch, epochs), self._step, messages.logged_step(trainer)
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


# ---- the live bar --------------------------------------------------------------------------------
REFRESHES_PER_SECOND = 4
TQDM_REFRESH_BATCHES = 20  # without rich: TQDM counts batches, not seconds


class LitProgressBar(RichProgressBar):
    """``RichProgressBar`` whose training bar and metrics update at most ``refresh_rate`` times a second.

    Args:
        refresh_rate: Redraws per second (Lightning's default is 100).
        kwargs: Passed to ``RichProgressBar``.
    """

    def __init__(self, refresh_rate: int = REFRESHES_PER_SECOND, **kwargs: Any) -> None:
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self._next_update = 0.0
        self.samples_per_s = 0.0  # training samples per second (all processes), over the last redraw
        self._batches = 0
        self._rate_mark = (0.0, 0)  # (time, batches) of the last rate
        self._full = 0  # samples of a full batch (the largest seen)
        self.command: list[str] | None = None  # the command line, for the run line's resume command
        self._lines: ProgressLog | None = None  # the run folder and the final line, as in a log

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._lines = ProgressLog(interval=0, command=self.command)
        self._lines.setup(trainer, pl_module, stage)  # (written on global rank zero only)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        if self._lines is not None:
            self._lines.on_fit_start(trainer, pl_module)  # "lit-gpu: run <folder>; resume: ..."

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_end(trainer, pl_module)
        if self._lines is not None:
            self._lines.on_fit_end(trainer, pl_module)  # "lit-gpu: fit done in ...; checkpoint ..."

    @override
    def configure_columns(self, trainer: pl.Trainer) -> list:
        columns = super().configure_columns(trainer)
        return [*columns[:-1], _SamplesPerSecondColumn(self, columns[-1])]  # the last: Lightning's it/s

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)  # the last 4 characters of "version_0": "on_0"
        version = getattr(trainer.logger, "version", None) if trainer.logger is not None else None
        if version is not None:
            number = version_number(str(version))
            items["version"] = str(number if number is not None else version)  # not "0.000"
        # names (and text values) come from the model, or a checkpoint's logging state: escaped
        return {shown(key): shown(value) if isinstance(value, str) else value for key, value in items.items()}

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._batches, self._rate_mark = 0, (time.monotonic(), 0)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.monotonic()
        self._batches += 1
        last = batch_idx + 1 >= self.total_train_batches
        if now >= self._next_update or last or self.train_progress_bar_id is None:
            self._next_update = now + 1.0 / max(self.refresh_rate, 1)
            then, batches = self._rate_mark
            if now > then and self._batches > batches:
                size = extract_batch_size(batch)
                self._full = max(self._full, size)
                # every batch full but a partial last one, which counts its own samples
                samples = (self._batches - batches) * self._full - (self._full - size)
                self.samples_per_s = samples * trainer.world_size / (now - then)
                self._rate_mark = (now, self._batches)
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        else:  # what the parent does on every batch besides drawing: forget the eval bars
            self.val_progress_bar_id = None
            self.test_progress_bar_id = None
            self.predict_progress_bar_id = None


class _SamplesPerSecondColumn:
    """The training bar's speed as samples/s (from :class:`LitProgressBar`); other bars keep it/s."""

    def __new__(cls, bar: LitProgressBar, fallback: Any) -> Any:
        from rich.progress import ProgressColumn
        from rich.text import Text

        class Column(ProgressColumn):
            def render(self, task: Any) -> Text:
                if task.id == bar.train_progress_bar_id and bar.samples_per_s > 0:
                    return Text(f"{bar.samples_per_s:,.0f} samples/s", style=fallback.style)
                return fallback.render(task)

        return Column()


_DEFAULT = "_lit_gpu_default_bar"  # marks the bar lit_gpu added (a user's own bar is never replaced)


def default_progress_bar() -> ProgressBar:
    """:class:`LitProgressBar` when ``rich`` is installed, else TQDM redrawn every 20 batches."""
    bar = LitProgressBar() if importlib.util.find_spec("rich") is not None else None
    bar = bar or TQDMProgressBar(refresh_rate=TQDM_REFRESH_BATCHES)
    setattr(bar, _DEFAULT, True)
    return bar


class RunLines(pl.Callback):
    """The run's start and end lines alone (``lit-gpu: run <folder>...``, ``lit-gpu: fit done ...``).

    For a Trainer without a progress bar (``enable_progress_bar: false``, as ``configs/debug.yaml``): the
    user still learns the run's folder. Not a :class:`ProgressBar` (Lightning refuses one when the bar is
    off); written on global rank zero only.
    """

    def __init__(self, command: list[str] | None = None) -> None:
        self._lines = ProgressLog(interval=0, command=command)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._lines.setup(trainer, pl_module, stage)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._lines.on_fit_start(trainer, pl_module)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._lines.count_batch()  # a resumed fit that trained is no "nothing to train" (resume/state.py)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._lines.on_fit_end(trainer, pl_module)

    def _eval_start(self, trainer: pl.Trainer, stage: str) -> None:
        if trainer.state.fn == stage:  # a validate/test/predict command, not fit's validation
            self._lines.start_eval_command(trainer, stage)

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_start(trainer, "validate")

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_start(trainer, "test")

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval_start(trainer, "predict")


def use_progress_log(
    trainer: pl.Trainer,
    interval: float = DEFAULT_INTERVAL,
    format: str = "text",  # noqa: A002 - the flag's name
    command: list[str] | None = None,
) -> ProgressLog | None:
    """Put a :class:`ProgressLog` in place of lit_gpu's default bar when stdout is no terminal, or for JSON.

    Returns the :class:`ProgressLog` now in ``trainer.callbacks``, or ``None`` (the live bar stays, or
    the progress bar is off, or it is the user's own). With the progress bar off, :class:`RunLines`
    still names the run's folder.
    """
    remember_command(trainer, command)  # the stop line's resume command names this run's last.ckpt
    callbacks = trainer.callbacks
    if trainer.progress_bar_callback is None:
        callbacks.append(RunLines(command=command))
        return None
    for index, callback in enumerate(callbacks):
        if getattr(callback, _DEFAULT, False):
            if live_bar_fits() and format != "json":
                if isinstance(callback, LitProgressBar):
                    callback.command = command
                return None
            log = ProgressLog(interval=interval, format=format, command=command)  # type: ignore[arg-type]
            callbacks[index] = log
            for i, summary in enumerate(callbacks):  # Lightning chose the Rich table for the Rich bar
                if isinstance(summary, RichModelSummary):
                    callbacks[i] = ModelSummary()
            return log
    return None
