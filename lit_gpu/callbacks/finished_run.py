"""A resume of a run that had already reached its ``max_epochs``/``max_steps``: one line that says so.

Lightning restores such a checkpoint, finds its loop done and returns without a step
("`Trainer.fit` stopped: `max_epochs=3` reached."); lit_gpu's end line would then read
``fit done in 0:00:00: no metrics logged``. :func:`finished_line` names the limit the run reached and
how to train it further instead.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lit_gpu import messages, numbering

__all__ = ["finished_line"]


def finished_line(trainer: pl.Trainer) -> str | None:
    """The line for a fit resumed from ``trainer.ckpt_path`` that trained no batch (the caller counted them)
    because the run had reached its limit; else ``None``."""
    ckpt = getattr(trainer, "ckpt_path", None)  # a stand-in trainer may have none
    if not ckpt:
        return None
    epoch = trainer.current_epoch  # the loop's count once done: max_epochs; the last epoch run is one less
    if trainer.max_epochs is not None and 0 < trainer.max_epochs <= epoch:
        epoch = trainer.max_epochs - 1
    point = numbering.ckpt_point(numbering.logged_step(trainer), epoch)
    max_steps = trainer.max_steps
    if max_steps is not None and max_steps >= 0 and trainer.global_step >= max_steps:
        limit, flag, example = f"max_steps={max_steps}", "--trainer.max_steps", max(2 * max_steps, 1)
    elif _epochs_reached(trainer):
        epochs = trainer.max_epochs
        limit, flag, example = f"max_epochs={epochs}", "--trainer.max_epochs", max(2 * (epochs or 0), 1)
    else:
        return None
    ckpt = messages.shown(ckpt)
    return messages.FINISHED_RUN.format(ckpt=ckpt, limit=limit, point=point, flag=flag, example=example)


def _epochs_reached(trainer: Any) -> bool:
    epochs = trainer.max_epochs
    return epochs is not None and epochs >= 0 and trainer.current_epoch >= epochs
