"""``python free_gpu_fit.py OUT_DIR <lit-gpu fit args>``: a real fit where every rank records its GPU.

Runs ``LitGpuCLI`` (re-run by Lightning's DDP launcher for the other ranks) with one extra callback
that writes ``OUT_DIR/rank<global rank>.json``: the local rank, ``CUDA_VISIBLE_DEVICES`` and the
``GPU-`` UUID of the device the rank trains on, as CUDA reports it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch

from lit_gpu.cli import LitGpuCLI


class RecordGpu(pl.Callback):
    """Writes which physical GPU this rank uses."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        device = trainer.strategy.root_device
        report = {
            "local_rank": trainer.local_rank,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "uuid": f"GPU-{torch.cuda.get_device_properties(device).uuid}",
        }
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(report))


class RecordingCLI(LitGpuCLI):
    def instantiate_trainer(self, **kwargs):
        trainer = super().instantiate_trainer(**kwargs)
        trainer.callbacks.append(RecordGpu(OUT))
        return trainer


OUT = Path(sys.argv[1])
if __name__ == "__main__":
    RecordingCLI(args=sys.argv[2:])  # the DDP launcher re-runs this whole argv, OUT_DIR included
