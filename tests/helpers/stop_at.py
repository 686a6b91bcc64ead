"""A deterministic Ctrl+C: the run sends itself SIGINT as the batch after global step
``$LIT_GPU_TEST_SIGINT_AT`` starts (the run stops once that batch is done).

The command line stays the same from attempt to attempt (the stop line's resume command repeats it); the
environment decides whether this attempt is stopped. No timing: the signal lands at that step boundary.
"""

from __future__ import annotations

import os
import signal

import lightning.pytorch as pl

ENV = "LIT_GPU_TEST_SIGINT_AT"


class SigintAtStepFromEnv(pl.Callback):
    """SIGINT to its own process when batch ``step + 1`` is about to start (unset or empty: never)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = os.environ.get(ENV, "")
        if step and trainer.global_step == int(step):
            os.kill(os.getpid(), signal.SIGINT)
