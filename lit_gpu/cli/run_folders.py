"""The CLI's defaults around a run that are not the run's: the progress bar, the monitor's fallback.

Where runs write (loggers, ``--loggers``, ``--new_run``, the rebuild from ``--ckpt_path FILE`` alone,
the model spec for export) is :mod:`lit_gpu.run.loggers`'.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.progress import default_progress_bar
from lit_gpu.run.layout import config_value

DEFAULT_MONITOR = "val/loss"


def progress_bar_callbacks(config: Any) -> list[Any] | None:
    """``trainer.callbacks`` plus lit_gpu's progress bar, or ``None`` when the config needs none added.

    Nothing is added when the progress bar is off or the config already has one.
    """
    trainer = config_value(config, "trainer", {})
    if config_value(trainer, "enable_progress_bar", True) is False:
        return None
    callbacks = config_value(trainer, "callbacks", [])
    callbacks = list(callbacks) if isinstance(callbacks, list | tuple) else [callbacks]
    if any(isinstance(c, pl.callbacks.ProgressBar) for c in callbacks):
        return None
    return [*callbacks, default_progress_bar()]


def adapt_checkpoint_monitor(trainer: pl.Trainer) -> None:
    """The default ``val/loss`` monitor falls back to ``last.ckpt`` only for modules that never log it."""
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, FreshLastCheckpoint) and callback.monitor == DEFAULT_MONITOR:
            callback.monitor_fallback = True
