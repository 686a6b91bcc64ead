"""Keep what ``self.log`` gathered in an epoch across a mid-epoch save, so a resumed run's curves are exact.

Lightning drops a training epoch's logging accumulators when a fit resumes mid-epoch: the epoch
aggregates (``*_epoch`` columns, torchmetrics objects) then cover only the steps after the resume, and
a value logged once an epoch (a learning rate at its first batch) is blank for the rest of it.
:class:`LoggingStateCallback` saves them with the checkpoint, next to the weights and the RNG states of
the step, and puts them back when the resumed fit starts (:mod:`lit_gpu.upstream.logging_state`).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lit_gpu.callbacks.rng_state import batches_in_flight
from lit_gpu.upstream.logging_state import (
    LOGGING_STATE_KEY,
    VAL_STEPS_KEY,
    capture,
    check_val_steps,
    restore,
    set_val_steps,
    val_steps,
)


class LoggingStateCallback(Callback):
    """Save the current epoch's logged values and torchmetrics states in a mid-epoch checkpoint; restore them.

    Covers any LightningModule that logs with ``self.log`` (tensors or torchmetrics objects) and
    lit_gpu's modules' own train-loss accumulators. A save at an epoch's end holds nothing (its
    aggregates were logged), so does one with several processes (each process has its own
    accumulators; Lightning's behaviour stays) and one made in the middle of a training step (a second
    Ctrl+C: the step's values are partly logged).
    """

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[str, Any] | None = None
        self._val_steps: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pending": None, "_val_steps": None}  # a copy belongs to no fit

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == "fit" and (steps := val_steps(trainer)):
            checkpoint[VAL_STEPS_KEY] = steps  # per-step validation rows continue at their step
        if batches_in_flight(trainer):
            return
        state = capture(trainer, pl_module)
        if state is not None:
            checkpoint[LOGGING_STATE_KEY] = state

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._pending = checkpoint.get(LOGGING_STATE_KEY)
        self._val_steps = check_val_steps(checkpoint.get(VAL_STEPS_KEY, {}))  # malformed: start at 0

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the first validation of a resumed fit: its loop built its loaders (and zeroed its counters) just now
        steps, self._val_steps = self._val_steps, None
        if steps and not trainer.sanity_checking:
            set_val_steps(trainer, steps)
        elif steps:
            self._val_steps = steps

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        state, self._pending = self._pending, None
        if state is not None:
            restore(trainer, pl_module, state)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._pending = self._val_steps = None
