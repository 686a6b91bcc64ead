"""Cost of ``--oom_recovery`` when nothing runs out of memory: ms per training step, off vs on.

    PYTHONPATH=. python benchmarks/oom_recovery_overhead.py [--repeats 3] [--steps 60]

MnistCNN on random 28x28 inputs, batch 64, one CPU thread, runs alternated; prints the median of each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from lit_gpu.modules import ClassificationModule
from lit_gpu.nets import MnistCNN
from lit_gpu.oom.recovery import OOMRecovery


def _ms_per_step(callbacks: list[pl.Callback], steps: int) -> float:
    pl.seed_everything(0, verbose=False)
    inputs, targets = torch.randn(64 * steps, 1, 28, 28), torch.randint(0, 10, (64 * steps,))
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    loader = DataLoader(TensorDataset(inputs, targets), batch_size=64)
    start = time.perf_counter()
    trainer.fit(ClassificationModule(MnistCNN()), loader)
    return (time.perf_counter() - start) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = {
        "off": list,
        "on": lambda: [OOMRecovery()],
        "on, micro-batch 32 (2 x 32)": lambda: [OOMRecovery(micro_batch_size=32)],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, callbacks in variants.items():
            times[name].append(_ms_per_step(callbacks(), args.steps))
    for name, values in times.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: median {statistics.median(values):.1f} ms/step ({runs})")


if __name__ == "__main__":
    main()
