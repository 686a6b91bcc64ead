"""One numbering on every surface: how lit-gpu's lines name an epoch, a batch and a step (docs/runs.md,
"What the numbers mean"); the text itself goes out through :mod:`lit_gpu.messages`."""

from __future__ import annotations

from typing import Any

from lit_gpu.messages import shown


# ---- one numbering: every line that names an epoch or a step --------------------------------------------
# Lightning's own (docs/runs.md, "What the numbers mean"): an epoch is its 0-based index (current_epoch,
# metrics.csv's epoch, the checkpoint's epoch, the bar's "Epoch 1/2": index 1 of 0..2); a step is the
# 0-based index of the training step as Lightning's loggers write it (metrics.csv's step: global_step - 1
# once a step is done); a batch b/B counts the batches done in the epoch, as the bar's counter does.
def epoch_point(epoch: int, epochs: Any, batch: int | None = None, batches: Any = None) -> str:
    """``epoch e/L batch b/B`` as the progress bar names a point of a fit: ``e`` Lightning's 0-based
    ``current_epoch`` of the last index ``L`` (``max_epochs - 1``), ``b`` the batches done in that epoch
    (``epochs``: ``max_epochs``; unknown ``L``/``B``: ?)."""
    text = f"epoch {epoch}/{epochs - 1 if epochs is not None else '?'}"
    return text if batch is None else f"{text} batch {batch}/{batches if batches is not None else '?'}"


def fit_point(trainer: Any, batch: int, epoch: int | None = None) -> str:
    """:func:`epoch_point` of a running fit: ``epoch`` (0-based; ``trainer``'s current one by default) of its
    ``max_epochs`` (unknown when unbounded), ``batch`` of its training batches (unknown when infinite)."""
    epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
    batches = trainer.num_training_batches
    epoch = trainer.current_epoch if epoch is None else epoch
    return epoch_point(epoch, epochs, batch, batches if batches != float("inf") else None)


def logged_step(trainer: Any) -> int:
    """The step of the last training step done as Lightning's loggers number it (metrics.csv's ``step``): from
    0, one a batch that stepped (``global_step - 1`` under automatic optimization); -1 before the first."""
    module = getattr(trainer, "lightning_module", None)
    if module is None or getattr(module, "automatic_optimization", True):
        return int(trainer.global_step) - 1
    return int(trainer.fit_loop.epoch_loop.batch_progress.total.processed) - 1  # manual: every batch steps


def optimizer_steps_note(global_step: int, batches: int | None) -> str:
    """``; optimizer steps: N a batch`` where the global step counts optimizer steps, not batches (manual
    optimization with several optimizers), else nothing."""
    if batches is None or batches <= 0 or global_step == batches:
        return ""
    per = global_step / batches
    return f"; global steps are optimizer steps: {per:g} a batch, {batches} batches"


def ckpt_point(step: Any, epoch: Any) -> str:
    """``step S, epoch E`` for a checkpoint: ``S`` the loggers' step of its last training step, ``E`` its
    0-based epoch, the numbers metrics.csv shows for that point."""
    return f"step {shown(step)}" + ("" if epoch is None else f", epoch {shown(epoch)}")
