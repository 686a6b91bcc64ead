"""FreshLastCheckpoint: a ModelCheckpoint whose ``last.ckpt`` always holds the latest save point."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor
from typing_extensions import override


class FreshLastCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, with ``last.ckpt`` refreshed at every save point.

    Lightning 2.6 rewrites ``last.ckpt`` only when a top-k checkpoint was written at the same step.
    With a ``monitor``, a run whose metric stops improving would keep an old ``last.ckpt``, and
    ``--ckpt_path last`` would silently resume from that older epoch. Here ``last.ckpt`` follows
    every validation (or epoch end), whether or not the monitored metric improved.

    It extends two protected hooks of Lightning's class (``_save_topk_checkpoint``,
    ``_save_last_checkpoint``); ``tests/unit/test_upstream_pins.py`` pins what it relies on.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last_written_at_step: int | None = None

    @override
    def _save_topk_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]) -> None:
        super()._save_topk_checkpoint(trainer, monitor_candidates)
        if self.save_last and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, monitor_candidates)

    @override
    def _save_last_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]) -> None:
        if self._last_written_at_step == trainer.global_step and self.last_model_path:
            return  # already written for this step (Lightning asks twice after our refresh)
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self._last_written_at_step = trainer.global_step
