"""A user's own callbacks, as a LightningCLI project lists them in its ``trainer.callbacks`` (importable by
CLI subprocesses): the guarantee tests' config holds them beside Lightning's."""

from __future__ import annotations

import os
import time
from pathlib import Path

import lightning.pytorch as pl
from typing_extensions import override

from lit_gpu.callbacks import CheckpointOnInterrupt


class WaitForSigterm(pl.Callback):
    """At the end of training step ``step``, writes ``ready_file`` and waits until a SIGTERM reached the run.

    The wait ends when Lightning's flag (``trainer.received_sigterm``, set by Lightning's own SIGTERM handler
    and by lit_gpu's) is up, so a test that signals once ``ready_file`` exists lands the signal mid-epoch, at
    a known step, whatever the machine's speed. ``timeout`` (seconds) ends a wait no signal ends.
    """

    def __init__(self, step: int = 3, ready_file: str = "waiting.txt", timeout: float = 120.0) -> None:
        self.step = step
        self.ready_file = Path(ready_file)
        self.timeout = timeout

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step or trainer.received_sigterm:
            return
        tmp = self.ready_file.with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, self.ready_file)
        deadline = time.monotonic() + self.timeout
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.01)  # the signal's handler runs between the sleeps


class MyCheckpointOnInterrupt(CheckpointOnInterrupt):
    """A user's own subclass of a guarantee's class; at setup it writes ``marker`` (it is on the Trainer)."""

    def __init__(self, marker: str = "my_stop.txt") -> None:
        super().__init__()
        self.marker = marker

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        Path(self.marker).write_text(stage)
