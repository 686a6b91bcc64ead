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
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar
from typing_extensions import override

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

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.monotonic()
        last = batch_idx + 1 >= self.total_train_batches
        if now >= self._next_update or last or self.train_progress_bar_id is None:
            self._next_update = now + 1.0 / max(self.refresh_rate, 1)
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        else:  # what the parent does on every batch besides drawing: forget the eval bars
            self.val_progress_bar_id = None
            self.test_progress_bar_id = None
            self.predict_progress_bar_id = None


def default_progress_bar() -> ProgressBar:
    """:class:`LitProgressBar` when ``rich`` is installed, else TQDM redrawn every 20 batches."""
    if importlib.util.find_spec("rich") is not None:
        return LitProgressBar()
    return TQDMProgressBar(refresh_rate=TQDM_REFRESH_BATCHES)
