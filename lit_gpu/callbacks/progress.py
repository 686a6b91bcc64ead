"""The progress bar ``lit-gpu`` shows: Lightning's Rich bar, redrawn a few times a second.

Lightning 2.6's default ``RichProgressBar(refresh_rate=100)`` starts a thread that rebuilds the
whole display 100 times per second (also when stdout is a file), and on every training batch it
collects the logged metrics again (``get_metrics``: a dict rebuild and a ``.item()`` per value).
Both compete with the training loop; on a small CPU model that was several percent of the run
(docs/benchmarks.md, "lit_gpu overhead"). :class:`LitProgressBar` redraws
:data:`REFRESHES_PER_SECOND` times a second and updates the training bar at most that often; a
person sees the same bar.
"""

from __future__ import annotations

import importlib.util
import time
from functools import partial
from typing import Any

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

from lit_gpu.callbacks.progress_lines import resume_command
from lit_gpu.callbacks.progress_log import DEFAULT_INTERVAL, ProgressLog, live_bar_fits
from lit_gpu.messages import shown
from lit_gpu.preemption import remember_command
from lit_gpu.run.layout import version_number

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
        self._lines.count_batch()  # a resumed fit that trained is no "nothing to train" (finished_run.py)

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
    # the stop line's resume command names this run's last.ckpt
    remember_command(trainer, None if command is None else partial(resume_command, command))
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
