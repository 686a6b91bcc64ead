"""ResNet-18 on CIFAR-shaped images: a naive loop, a hand-tuned loop and lit_gpu's recipe, in one run.

    python benchmarks/resnet_gpu.py                         # on a GPU: batch 256, 6 workers
    python benchmarks/resnet_gpu.py --device cpu --steps 3 --warmup 1 --batch-size 8 --num-samples 256

All three train torchvision's ResNet-18 (:class:`lit_gpu.nets.ResNet18`, CIFAR stem) on the same
images (:class:`lit_gpu.data.SyntheticImageDataModule`: uint8 in host memory, per-sample crop/flip
augmentation, float normalization) in the same order (lit_gpu's loader's first-epoch order):

* **naive**: the seeds' first recipe: fp32, ``DataLoader`` in the main process, no pinned memory,
  blocking ``.to(device)``, ``torch.optim.AdamW`` with its defaults, ``loss.item()`` every step;
* **tuned**: pinned memory and the same worker processes as lit_gpu, ``non_blocking`` copies,
  channels-last, bf16 autocast, fused AdamW, ``cudnn.benchmark``, the recipe's OneCycle schedule;
* **lit_gpu**: ``lit-gpu fit --config lit_gpu:resnet_gpu`` as a user runs it (the CLI's objects, its
  default callbacks, its loader, the recipe's whole-step CUDA graph), only the step count and the
  workers set from here;
* **lit_gpu_eager**: the same with ``--speed.cuda_graph false`` (every kernel launched from Python, as
  in the tuned loop).

Each contestant runs ``--warmup`` steps, then ``--steps`` timed ones (GPU synchronized at both ends);
contestants are interleaved ``--repeats`` times and the median reported. Per contestant: images/s,
GPU busy (NVML's utilization, sampled every 20 ms in the timed window: the share of time a kernel
ran) and the main process's CPU time per step. Goal (issue 42): lit_gpu >= 0.97x tuned, >= 2x naive.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recipe import REPO, in_tempdir, machine, sync  # noqa: E402

from lit_gpu.data import SyntheticImageDataModule  # noqa: E402
from lit_gpu.data.stateful import ResumableSampler  # noqa: E402
from lit_gpu.nets import ResNet18  # noqa: E402

LR, MAX_LR, WEIGHT_DECAY = 0.002, 0.004, 0.05


class GpuBusy:
    """NVML's GPU utilization, sampled in a thread between :meth:`start` and :meth:`stop` (needs NVML)."""

    def __init__(self, device: str) -> None:
        self.handle = None
        if device == "cuda":
            try:
                import pynvml

                pynvml.nvmlInit()
                index = torch.cuda.current_device()
                self.handle, self.nvml = pynvml.nvmlDeviceGetHandleByIndex(index), pynvml
            except Exception:  # no NVML library, no permission: report no figure
                self.handle = None
        self.samples: list[int] = []
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def start(self) -> None:
        self.samples, self._stop = [], threading.Event()
        if self.handle is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()

    def stop(self) -> float | None:
        if self.handle is None:
            return None
        self._stop.set()
        self._thread.join()
        return statistics.mean(self.samples) if self.samples else None


class Window:
    """Times steps ``warmup`` .. ``warmup + steps``: wall, main-process CPU, GPU busy."""

    def __init__(self, device: str, warmup: int, steps: int, batch_size: int) -> None:
        self.device, self.warmup, self.steps, self.batch_size = device, warmup, steps, batch_size
        self.busy = GpuBusy(device)
        self.result: dict[str, Any] = {}

    def at_step(self, step: int) -> None:
        """Call before step ``step`` (0-based) starts; and once more with ``warmup + steps`` at the end."""
        if step == self.warmup:
            sync(self.device)
            self.busy.start()
            self.t0, self.c0 = time.perf_counter(), time.process_time()
        elif step == self.warmup + self.steps:
            sync(self.device)
            wall, cpu = time.perf_counter() - self.t0, time.process_time() - self.c0
            self.result = {
                "images_s": self.steps * self.batch_size / wall,
                "busy": self.busy.stop(),
                "cpu_ms": 1000 * cpu / self.steps,
            }


def first_epoch_order(data: SyntheticImageDataModule) -> list[int]:
    """The sample order of lit_gpu's training loader in its first epoch (one process)."""
    sampler = ResumableSampler(data.train_set, shuffle=True, seed=data.seed, drop_last=data.drop_last)
    return [index for index, _ in sampler]


def raw_loop(name: str, data: SyntheticImageDataModule, args: argparse.Namespace) -> dict[str, Any]:
    """The naive or the hand-tuned loop."""
    device = torch.device(args.device)
    tuned = name == "tuned"
    torch.manual_seed(0)
    model = ResNet18(num_classes=10).to(device)
    torch.backends.cudnn.benchmark = tuned
    if tuned:
        model = model.to(memory_format=torch.channels_last)
        fused = device.type == "cuda"
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=fused)
        total = args.warmup + args.steps
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, MAX_LR, total_steps=total)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
        scheduler = None
    loader = DataLoader(
        data.train_set,
        batch_size=args.batch_size,
        sampler=first_epoch_order(data),
        drop_last=True,
        num_workers=args.workers if tuned else 0,
        pin_memory=tuned and device.type == "cuda",
        persistent_workers=tuned and args.workers > 0,
    )
    window = Window(args.device, args.warmup, args.steps, args.batch_size)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=tuned)
    model.train()
    total = args.warmup + args.steps
    step = 0
    while step < total:
        for x, y in loader:
            if step == total:
                break
            window.at_step(step)
            if tuned:
                x = x.to(device, non_blocking=True, memory_format=torch.channels_last)
                y = y.to(device, non_blocking=True)
            else:
                x, y = x.to(device), y.to(device)
            with autocast:
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            if not tuned:
                loss.item()  # the seeds' "print the loss" habit: a wait for the GPU every step
            step += 1
    window.at_step(total)
    torch.backends.cudnn.benchmark = False
    return window.result


class _Timed(pl.Callback):
    def __init__(self, window: Window) -> None:
        self.window = window

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.window.at_step(trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        self.window.at_step(trainer.global_step)


def lit_gpu_fit(args: argparse.Namespace, more: list[str]) -> dict[str, Any]:
    """``lit-gpu fit --config lit_gpu:resnet_gpu`` with the step count and sizes set, timed."""
    from lit_gpu.cli import LitGpuCLI

    total = args.warmup + args.steps
    argv = ["--config", str(REPO / "configs" / "resnet_gpu.yaml"), *args.lit_args, *more]
    argv += ["--trainer.max_steps", str(total), "--model.scheduler.init_args.total_steps", str(total)]
    argv += ["--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0"]
    argv += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    argv += ["--data.batch_size", str(args.batch_size), "--data.num_workers", str(args.workers)]
    argv += ["--data.num_samples", str(args.num_samples), "--trainer.accelerator", args.device]
    if args.device == "cpu":
        argv += ["--trainer.precision", "32-true"]
    window = Window(args.device, args.warmup, args.steps, args.batch_size)
    with in_tempdir():
        cli = LitGpuCLI(args=argv, run=False)
        cli.trainer.callbacks.append(_Timed(window))
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return window.result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--steps", type=int, default=150, help="timed steps per contestant")
    parser.add_argument(
        "--warmup", type=int, default=30, help="untimed steps first (cuDNN's choices, workers)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the three, interleaved")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=6, help="DataLoader workers of tuned and lit_gpu")
    parser.add_argument("--num-samples", type=int, default=50000)
    parser.add_argument("--only", nargs="+", default=["naive", "tuned", "lit_gpu", "lit_gpu_eager"])
    parser.add_argument(
        "lit_args", nargs="*", help="more lit-gpu flags after --, e.g. -- --speed.cuda_graph true"
    )
    args = parser.parse_args()
    needed = (args.warmup + args.steps) * args.batch_size
    if needed > args.num_samples:
        parser.error(f"--num-samples must hold the {needed} images of warmup + steps (one epoch)")
    print(f"# {machine()}")
    steps = f"{args.warmup} + {args.steps} steps"
    print(f"# batch {args.batch_size}, {args.workers} workers, {steps}, x{args.repeats} interleaved")
    data = SyntheticImageDataModule(num_samples=args.num_samples, batch_size=args.batch_size, seed=0)
    data.setup()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in args.only}
    load_before = os.getloadavg()[0]
    for r in range(args.repeats):
        for name in args.only:
            if name.startswith("lit_gpu"):
                result = lit_gpu_fit(args, ["--speed.cuda_graph", "false"] if name == "lit_gpu_eager" else [])
            else:
                result = raw_loop(name, data, args)
            results[name].append(result)
            busy = result["busy"]
            print(
                f"# round {r}: {name}: {result['images_s']:.0f} images/s, GPU busy "
                f"{'n/a' if busy is None else f'{busy:.0f} %'}, CPU {result['cpu_ms']:.2f} ms/step, "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    load_after = os.getloadavg()[0]
    median = {n: statistics.median(r["images_s"] for r in rs) for n, rs in results.items()}
    print("\n| contestant | images/s (median) | GPU busy | host CPU / step | vs tuned | vs naive |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rs in results.items():
        busy = [r["busy"] for r in rs if r["busy"] is not None]
        busy_s = f"{statistics.median(busy):.0f} %" if busy else "n/a"
        cpu = statistics.median(r["cpu_ms"] for r in rs)
        vs_t = f"{median[name] / median['tuned']:.3f}x" if "tuned" in median else "-"
        vs_n = f"{median[name] / median['naive']:.2f}x" if "naive" in median else "-"
        print(f"| {name} | {median[name]:.0f} | {busy_s} | {cpu:.2f} ms | {vs_t} | {vs_n} |")
    print(f"\nload average before {load_before:.2f}, after {load_after:.2f} ({os.cpu_count()} cores)")
    if {"lit_gpu", "tuned", "naive"} <= set(median):
        ok = median["lit_gpu"] >= 0.97 * median["tuned"] and median["lit_gpu"] >= 2 * median["naive"]
        print(f"goal (lit_gpu >= 0.97x tuned and >= 2x naive): {'MET' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
