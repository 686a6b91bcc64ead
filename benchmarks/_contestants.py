"""The contestants of the ResNet benchmarks, timed alike: loops a user writes by hand, and lit_gpu's fit.

* **naive**: the seeds' first recipe: fp32, ``DataLoader`` in the main process, no pinned memory,
  blocking ``.to(device)``, ``torch.optim.AdamW`` with its defaults, ``loss.item()`` every step;
* **tuned**: pinned memory and the same worker processes as lit_gpu, ``non_blocking`` copies,
  channels-last, bf16 autocast (on CUDA; fp32 on a CPU, as lit_gpu's side is set there), fused AdamW (the
  recipe's),
  ``cudnn.benchmark``, the recipe's OneCycle schedule; every kernel launched from Python;
* **hand_graph**: the tuned loop with the whole step (forward, loss, backward, optimizer step) captured
  once as one CUDA graph and replayed, written as PyTorch's CUDA-graph notes write "whole network
  capture" (:class:`WholeStepGraph`): the technique of lit_gpu's ``--speed.cuda_graph``;
* **compile**: the tuned loop with ``torch.compile(model, mode="max-autotune")`` (Inductor's autotuned
  kernels and its CUDA graphs for forward and backward; the fused optimizer step stays eager);
* **lit_gpu**: ``lit-gpu fit --config lit_gpu:resnet_gpu`` as a user runs it (the CLI's objects, its
  default callbacks, its loader, the recipe's whole-step CUDA graph), only sizes and steps set;
* **lit_gpu_eager**: the same with ``--speed.cuda_graph false``.

Every contestant is timed by a :class:`Window`: ``warmup`` untimed steps, then ``steps`` timed ones (GPU
synchronized at both ends); "to steady" is the wall time from building the contestant (model,
optimizer, loader, CLI) to its first timed step: the warm-up each needs, capture and compile included.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import threading
import time
import traceback
from typing import Any

import lightning.pytorch as pl
import torch
from _recipe import REPO, in_tempdir, sync
from torch.nn import functional as F
from torch.utils.data import DataLoader

from lit_gpu.data import SyntheticImageDataModule
from lit_gpu.data.images import normalize_images
from lit_gpu.nets import ResNet18, ResNet50
from lit_gpu.resume.loaders import ResumableSampler

LR, MAX_LR, WEIGHT_DECAY = 0.002, 0.004, 0.05
HAND = ("naive", "tuned", "hand_graph", "compile")
LIT = ("lit_gpu", "lit_gpu_eager")

#: why a contestant does not run on a CPU
CPU_SKIPS = {
    "hand_graph": "a CUDA graph needs a CUDA device",
    "lit_gpu": "its whole-step capture needs a CUDA device (on a CPU it stands aside: that is lit_gpu_eager)",
    "compile": "torch.compile(mode='max-autotune') builds C++ kernels for minutes on a CPU: GPU only",
}


def skip_reason(name: str, device: str) -> str | None:
    """Why ``name`` is not run on ``device``, or None."""
    return CPU_SKIPS.get(name) if device != "cuda" else None


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
    """Times steps ``warmup`` .. ``warmup + steps``: wall, main-process CPU, GPU busy; the time to get there.

    ``profile``: a ``cProfile.Profile`` switched on for exactly the timed steps (the glue benchmark).
    """

    def __init__(self, args: argparse.Namespace, profile: cProfile.Profile | None = None) -> None:
        self.device, self.warmup, self.steps = args.device, args.warmup, args.steps
        self.batch_size, self.profile = args.batch_size, profile
        self.busy = GpuBusy(args.device)
        self.result: dict[str, Any] = {}
        self.built = time.perf_counter()

    def at_step(self, step: int) -> None:
        """Call before step ``step`` (0-based) starts; with ``warmup + steps`` once the last step ended."""
        if step == self.warmup:
            sync(self.device)
            self.busy.start()
            self.t0, self.c0 = time.perf_counter(), time.process_time()
            if self.profile is not None:
                self.profile.enable()
        elif step == self.warmup + self.steps and not self.result:
            if self.profile is not None:
                self.profile.disable()
            sync(self.device)
            wall, cpu = time.perf_counter() - self.t0, time.process_time() - self.c0
            self.result = {
                "images_s": self.steps * self.batch_size / wall,
                "busy": self.busy.stop(),
                "cpu_ms": 1000 * cpu / self.steps,
                "steady_s": self.t0 - self.built,
            }


class OneLayer(torch.nn.Module):
    """A linear classifier of the flattened image: a step whose arithmetic is negligible, so that the host
    CPU a step is the loop's own glue (``resnet_gpu.py --net one_layer``)."""

    def __init__(self, num_classes: int = 10, image_size: int = 32) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3 * image_size * image_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))  # (N, 3, H, W) -> (N, num_classes)


def make_net(args: argparse.Namespace) -> torch.nn.Module:
    """The workload's network: ResNet-18 (CIFAR stem), ResNet-50 (ImageNet stem above 64 px) or OneLayer."""
    if args.net == "resnet50":
        return ResNet50(num_classes=10, cifar_stem=args.image_size <= 64)
    if args.net == "one_layer":
        return OneLayer(10, args.image_size)
    return ResNet18(num_classes=10)


def first_epoch_order(data: SyntheticImageDataModule) -> list[int]:
    """The sample order of lit_gpu's training loader in its first epoch (one process)."""
    sampler = ResumableSampler(data.train_set, shuffle=True, seed=data.seed, drop_last=data.drop_last)
    return [index for index, _ in sampler]


class WholeStepGraph:
    """A training step captured whole as one CUDA graph, as a user writes it from PyTorch's CUDA-graph notes.

    Static input tensors that each batch is copied into; a few warm-up steps on a side stream (lazy
    state, cuDNN's choices); then one capture of forward, loss, backward and ``optimizer.step()`` (the
    optimizer ``capturable``, its learning rate a device tensor that the scheduler fills) and a replay per
    step. ``capture_error_mode="thread_local"``: the DataLoader's pin-memory thread allocates pinned memory
    at any time, which the default global mode turns into a failed capture.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, warmup: int = 3) -> None:
        self.model, self.optimizer, self.warmup = model, optimizer, warmup
        self.static: tuple[torch.Tensor, torch.Tensor] | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.side = torch.cuda.Stream()
        self.seen = 0

    def _step(self) -> None:
        x, y = self.static
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.static is None:
            self.static = (x.clone(), y.clone())
        else:
            self.static[0].copy_(x, non_blocking=True)
            self.static[1].copy_(y, non_blocking=True)
        if self.graph is None and self.seen < self.warmup:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                self.optimizer.zero_grad(set_to_none=True)
                self._step()
            torch.cuda.current_stream().wait_stream(self.side)
        else:
            if self.graph is None:
                self.optimizer.zero_grad(set_to_none=True)  # the graph's backward allocates the grads
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                    self._step()
            self.graph.replay()
        self.seen += 1


def raw_loop(
    name: str,
    data: SyntheticImageDataModule,
    args: argparse.Namespace,
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:
    """One hand-written contestant (:data:`HAND`), timed."""
    window = Window(args, profile)
    device = torch.device(args.device)
    cuda, tuned = device.type == "cuda", name != "naive"
    torch.manual_seed(0)
    model = make_net(args).to(device)
    torch.backends.cudnn.benchmark = tuned
    if tuned:
        model = model.to(memory_format=torch.channels_last)
    graph = name == "hand_graph"
    lr = torch.tensor(LR, device=device) if graph else LR  # a tensor: the scheduler's fill_ reaches the graph
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY, fused=tuned, capturable=graph
    )
    total = args.warmup + args.steps
    scheduler = (
        torch.optim.lr_scheduler.OneCycleLR(optimizer, MAX_LR, total_steps=total, cycle_momentum=False)
        if tuned
        else None
    )
    net = torch.compile(model, mode="max-autotune") if name == "compile" else model
    whole_step = WholeStepGraph(model, optimizer) if graph else None
    loader = DataLoader(
        data.train_set,
        batch_size=args.batch_size,
        sampler=first_epoch_order(data),
        drop_last=True,
        num_workers=args.workers if tuned else 0,
        pin_memory=tuned and cuda,
        persistent_workers=tuned and args.workers > 0,
    )
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=tuned and cuda)
    model.train()
    step = 0
    while step < total:
        for x, y in loader:
            window.at_step(step)
            if tuned:
                x = x.to(device, non_blocking=True, memory_format=torch.channels_last)
                y = y.to(device, non_blocking=True)
            else:
                x, y = x.to(device), y.to(device)
            x = normalize_images(x)  # the loader's uint8 pixels, normalized on the device (as lit_gpu's data)
            if whole_step is not None:
                whole_step(x, y)
            else:
                if name == "compile":
                    torch.compiler.cudagraph_mark_step_begin()  # a new step: last step's outputs may go
                with autocast:
                    loss = F.cross_entropy(net(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if not tuned:
                    loss.item()  # the seeds' "print the loss" habit: a wait for the GPU every step
            if scheduler is not None:
                scheduler.step()
            step += 1
            if step == total:
                window.at_step(total)
                break
    torch.backends.cudnn.benchmark = False
    return window.result


class _Timed(pl.Callback):
    def __init__(self, window: Window, total: int) -> None:
        self.window, self.total = window, total

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.window.at_step(trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.total:  # before the epoch's end (its checkpoint) as in the raw loop
            self.window.at_step(self.total)


def lit_gpu_fit(
    name: str,
    data: SyntheticImageDataModule,
    args: argparse.Namespace,
    more: list[str],
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:
    """``lit-gpu fit --config lit_gpu:resnet_gpu`` with sizes and steps set (and ``more``), timed.

        The CLI builds its own objects; its data module gets the images ``data`` made (same arguments,
        same seed: the same images), so each contestant does not make them again. Every contestant's loader
    carries uint8 pixels, normalized on the device after the copy (the data module's
    ``on_after_batch_transfer``; ``normalize_images`` in the hand-written loops).
    """
    from lit_gpu.cli import LitGpuCLI

    window = Window(args, profile)
    total = args.warmup + args.steps
    argv = ["--config", str(REPO / "configs" / "resnet_gpu.yaml"), *args.lit_args, *more]
    if name == "lit_gpu_eager":
        argv += ["--speed.cuda_graph", "false"]
    argv += ["--trainer.max_steps", str(total), "--model.scheduler.init_args.total_steps", str(total)]
    argv += ["--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0"]
    argv += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    argv += ["--data.batch_size", str(args.batch_size), "--data.num_workers", str(args.workers)]
    argv += ["--data.num_samples", str(data.num_samples), "--data.image_size", str(data.image_size)]
    argv += ["--trainer.accelerator", args.device]
    if args.device == "cpu":
        argv += ["--trainer.precision", "32-true"]
    with in_tempdir():
        cli = LitGpuCLI(args=argv, run=False)
        for part in ("train_set", "val_set", "test_set"):
            setattr(cli.datamodule, part, getattr(data, part))
        cli.trainer.callbacks.insert(0, _Timed(window, total))  # first: its end before the final save
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return window.result


def run_contestant(
    name: str,
    data: SyntheticImageDataModule,
    args: argparse.Namespace,
    lit_more: list[str] = (),
    profile: cProfile.Profile | None = None,
) -> dict[str, Any]:
    """Contestant ``name`` (:data:`HAND` or :data:`LIT`), timed."""
    if name in LIT:
        return lit_gpu_fit(name, data, args, list(lit_more), profile)
    return raw_loop(name, data, args, profile)


def make_data(args: argparse.Namespace, num_samples: int) -> SyntheticImageDataModule:
    """The images every contestant trains on, made once."""
    data = SyntheticImageDataModule(
        num_samples=num_samples,
        image_size=args.image_size,
        batch_size=args.batch_size,
        num_workers=args.workers,
        seed=0,
    )
    data.setup()
    return data


def interleaved(
    names: list[str], data: SyntheticImageDataModule, args: argparse.Namespace, lit_more: list[str] = ()
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """``args.repeats`` rounds of every contestant in ``names`` in turn; (results by name, skipped: why).

    A contestant that raises is reported as failed (its traceback printed) and left out of later rounds.
    """
    skipped = {n: why for n in names if (why := skip_reason(n, args.device)) is not None}
    for name, why in skipped.items():
        print(f"# {name}: skipped, {why}")
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names if n not in skipped}
    for r in range(args.repeats):
        for name in [n for n in results if n not in skipped]:
            try:
                result = run_contestant(name, data, args, lit_more)
            except Exception as err:  # a failed capture or compile: the others' figures still come
                traceback.print_exc(file=sys.stdout)
                skipped[name] = (
                    f"failed in round {r}: {type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
                )
                del results[name]
                continue
            results[name].append(result)
            busy = result["busy"]
            print(
                f"# round {r}: {name}: {rate(result['images_s'])} images/s, GPU busy "
                f"{'n/a' if busy is None else f'{busy:.0f} %'}, CPU {result['cpu_ms']:.2f} ms/step, "
                f"to steady {result['steady_s']:.1f} s, load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    return results, skipped


def steady(rs: list[dict[str, Any]]) -> str:
    """The "to steady" cell: the first round's seconds (compile, capture, cuDNN's choices), the later ones."""
    first = f"{rs[0]['steady_s']:.1f} s"
    return first if len(rs) == 1 else f"{first} / {statistics.median(r['steady_s'] for r in rs[1:]):.1f} s"


def rate(images_s: float) -> str:
    """Images/s for a table: whole numbers on a GPU, two decimals for a CPU's tiny runs."""
    return f"{images_s:.0f}" if images_s >= 100 else f"{images_s:.2f}"
