"""What the batch-log progress lines cost per step: the same fit with and without :class:`ProgressLog`.

    python benchmarks/progress_log_overhead.py [--steps 400] [--repeats 7] [--interval 30]

Two variants, interleaved per repeat so that machine load hits both alike: "bare" (no progress bar,
logger, summary or checkpointing) and "bare + ProgressLog" (the same with lit_gpu's plain progress
lines, as ``lit-gpu fit`` uses them when stdout is not a terminal, every ``--interval`` seconds and at the
epoch end). Figures: medians of the wall time, and of the per-repeat ratio to "bare"; the load average
is printed with them (a ratio taken at load > 1.5 is noise).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recipe import machine  # noqa: E402

from lit_gpu.callbacks.progress import ProgressLog  # noqa: E402
from lit_gpu.modules import ClassificationModule  # noqa: E402
from lit_gpu.nets import FastMnistNet  # noqa: E402
from lit_gpu.resume.loaders import TensorLoader  # noqa: E402  # noqa: E402


def run(x: torch.Tensor, y: torch.Tensor, batch_size: int, interval: float | None) -> float:
    torch.manual_seed(0)
    module = ClassificationModule(FastMnistNet(12, 24, kernel_size=5))
    callbacks = [] if interval is None else [ProgressLog(interval=interval, stream=io.StringIO())]
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        enable_progress_bar=interval is not None,
        callbacks=callbacks,
    )
    data = TensorLoader(x, y, batch_size=batch_size, shuffle=True, drop_last=True, seed=0)
    t0 = time.perf_counter()
    trainer.fit(module, train_dataloaders=data)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {machine()}")
    g = torch.Generator().manual_seed(0)
    n = args.steps * args.batch_size
    x, y = torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
    times: dict[str, list[float]] = {"bare": [], "bare + ProgressLog": []}
    for r in range(args.repeats):
        times["bare"].append(run(x, y, args.batch_size, None))
        times["bare + ProgressLog"].append(run(x, y, args.batch_size, args.interval))
        print(f"  repeat {r}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()), flush=True)
    ratios = [b / a for a, b in zip(times["bare"], times["bare + ProgressLog"], strict=True)]
    print(f"\n# load average {os.getloadavg()[0]:.2f} (1 min)")
    print(f"| variant | wall s (median of {args.repeats}) | ratio to bare |")
    print("|---|---:|---:|")
    print(f"| bare | {statistics.median(times['bare']):.3f} | 1.000x |")
    print(
        f"| bare + ProgressLog (interval {args.interval:g} s) | "
        f"{statistics.median(times['bare + ProgressLog']):.3f} | {statistics.median(ratios):.3f}x |"
    )


if __name__ == "__main__":
    main()
