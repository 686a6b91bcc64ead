"""lit_gpu's overhead over a raw PyTorch loop, and the cost of each piece of its default stack.

    python benchmarks/overhead.py [--steps 300] [--repeats 5] [--threads 1] [--components all]
    python benchmarks/overhead.py --count-calls            # Python calls per step: load-independent
    python benchmarks/overhead.py --paired --steps 200 --repeats 5 --threads 1 --components none
    python benchmarks/overhead.py --device cuda            # raw / default / bare on the GPU + sync count

Same net (``FastMnistNet(12, 24, k=5)``), same MNIST-shaped random tensors, same batches, same
SGD steps in every variant:

* ``raw``: ``for xb, yb in batches: loss = F.cross_entropy(net(xb), yb); zero_grad; backward; step``;
* ``lit_gpu default``: the Trainer and module exactly as ``lit-gpu fit`` builds them
  (``LitGpuCLI(run=False)``: ``ClassificationModule``, lit_gpu's progress bar, CSV + TensorBoard
  loggers, model summary, ``FreshLastCheckpoint``, ``NaNGuard``, ``SpeedLevers``, RNG state,
  interrupt checkpoint, run-folder sync, atomic checkpoint IO, lit_gpu's profiler) iterating
  lit_gpu's resumable ``TensorLoader``;
* ``bare Lightning``: a minimal ``LightningModule`` (``training_step`` returns the loss) in a
  ``Trainer`` with progress bar, logger, model summary and checkpointing off: the floor that
  Lightning's loop itself costs;
* ``-X``: the default stack with the one component ``X`` switched off (``--components``): its
  cost is ``default - (-X)``.

Noise protection: variants run interleaved, in a rotated order each repeat; every figure is the
median over repeats with its spread (min-max); ratios are medians of per-repeat ratios to the raw
loop of the same repeat. The load average is printed before and after; when either exceeds
``--max-load`` (1.5) the ratios are not reported ("noise: load X"), only the seconds.

Figures: ``wall`` is the whole ``fit`` (trainer start-up and end-of-run save included); ``step``
is the median time per training step between the start of step ``--warmup`` and the start of the
last step (the step path only); ``CPU`` is this process's CPU time for the whole run.

``--paired``: the Lightning variants only, each with one raw-loop step (own net, own batches) run
right before every one of its steps (:class:`PairedRaw`), so both are timed in the same fraction of a
second; the figure is the median of the per-step ratios with its quartiles. On a shared VM whose speed
drifts by 10 % and more over seconds this is the figure to read; whole-run ratios keep the drift.

All variants run in one process, so they share its malloc settings: lit_gpu's default
``--speed.keep_host_memory`` (set at the first lit_gpu run, the warm-up) then serves the raw loop too,
and the ratios compare the loops alone. What that setting saves a raw loop in its own process is
``benchmarks/host_memory.py``.

``--count-calls`` runs each variant once under ``sys.setprofile`` and prints the Python function
calls (and C calls) per training step on the step path: a figure that machine load does not move.

``--device cuda``: raw, default and bare on the GPU, data resident there, interleaved; then one
more pass of each under ``torch.cuda.set_sync_debug_mode("warn")`` that counts host-device
synchronizations per step on the step path.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recipe import MAX_LOAD, machine  # noqa: E402

from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint  # noqa: E402
from lit_gpu.callbacks.nan_guard import NaNGuard  # noqa: E402
from lit_gpu.callbacks.speed import SpeedLevers  # noqa: E402
from lit_gpu.fastpath.batch import LeanTrainingBatch  # noqa: E402
from lit_gpu.fastpath.step import LeanOptimizerStep, SkipIdleHooks  # noqa: E402
from lit_gpu.nets import FastMnistNet  # noqa: E402
from lit_gpu.preemption import CheckpointOnInterrupt  # noqa: E402
from lit_gpu.resume.loaders import TensorLoader  # noqa: E402
from lit_gpu.resume.state import RNGStateCallback  # noqa: E402
from lit_gpu.run.loggers import RunFolderSync  # noqa: E402

BATCH = 128


# ---- data and the raw loop ----------------------------------------------------------------------
def make_data(steps: int, batch_size: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed random MNIST-shaped tensors, exactly ``steps`` batches, on ``device``."""
    g = torch.Generator().manual_seed(0)
    n = steps * batch_size
    x, y = torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
    return x.to(device), y.to(device)


class PlainBatches:
    """The raw loop's batches: the same permutation as ``TensorLoader`` (seed 0, epoch 0), sliced
    without any position bookkeeping. Also the loader of the ``-stateful_loader`` variant."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> None:
        self.x, self.y, self.b = x, y, batch_size
        self.order = TensorLoader(x, y, batch_size=batch_size, shuffle=True, seed=0).indices().to(x.device)

    def __len__(self) -> int:
        return len(self.x) // self.b

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(len(self)):
            idx = self.order[i * self.b : (i + 1) * self.b]
            yield self.x.index_select(0, idx), self.y.index_select(0, idx)


def make_net(device: str) -> FastMnistNet:
    torch.manual_seed(0)
    return FastMnistNet(12, 24, kernel_size=5).to(device)


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)


class Marks:
    """Time stamps at the start of step ``warmup`` and of the last step (+ an optional hook there).

    ``on_start``/``on_end`` let ``--count-calls`` and the sync count switch their probe on and off
    around exactly the measured steps.
    """

    def __init__(self, warmup: int, last: int, device: str, probe: Any = None) -> None:
        self.warmup, self.last, self.device, self.probe = warmup, last, device, probe
        self.t_start = self.t_end = 0.0

    def at(self, i: int) -> None:
        if i == self.warmup:
            if self.probe is None:
                _sync(self.device)
            self.t_start = time.perf_counter()
            if self.probe is not None:
                self.probe.start()
        elif i == self.last:
            if self.probe is not None:
                self.probe.stop()
            else:
                _sync(self.device)
            self.t_end = time.perf_counter()

    @property
    def per_step(self) -> float:
        return (self.t_end - self.t_start) / max(1, self.last - self.warmup)


class MarksCallback(pl.Callback):
    def __init__(self, marks: Marks) -> None:
        self.marks = marks

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.marks.at(batch_idx)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


Result = dict[str, float]


def run_raw(x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace, probe: Any = None) -> Result:
    steps = len(x) // args.batch_size
    marks = Marks(args.warmup, steps - 1, args.device, probe)
    net = make_net(args.device)
    opt = sgd(net.parameters())
    net.train()
    _sync(args.device)
    c0, t0 = time.process_time(), time.perf_counter()
    for i, (xb, yb) in enumerate(PlainBatches(x, y, args.batch_size)):
        marks.at(i)
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    _sync(args.device)
    t1 = time.perf_counter()
    return {"wall": t1 - t0, "step": marks.per_step, "cpu": time.process_time() - c0}


# ---- Lightning variants -------------------------------------------------------------------------
class MinimalModule(pl.LightningModule):
    """The least a LightningModule can be: the bare-Lightning floor (and the ``-module`` variant)."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return sgd(self.parameters())


def _trainer_flags(args: argparse.Namespace, steps: int) -> list[str]:
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    return [
        "--trainer.accelerator", accelerator, "--trainer.devices", "1",
        "--trainer.max_steps", str(steps), "--trainer.max_epochs", "1",
        "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0",
    ]  # fmt: skip


MODEL_ARGS = [
    "--model", "lit_gpu.modules.ClassificationModule",
    "--model.net", "lit_gpu.nets.FastMnistNet",
    "--model.net.c1", "12", "--model.net.c2", "24", "--model.net.kernel_size", "5",
    "--model.optimizer", "torch.optim.SGD",
    "--model.optimizer.lr", "0.05", "--model.optimizer.momentum", "0.9", "--model.optimizer.nesterov", "true",
]  # fmt: skip


def _drop(*kinds: type) -> Callable[[pl.Trainer], None]:
    def edit(trainer: pl.Trainer) -> None:
        trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, kinds)]

    return edit


def _plain_checkpoint_io(trainer: pl.Trainer) -> None:
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    trainer.strategy.checkpoint_io = TorchCheckpointIO()


def _lightning_profiler(trainer: pl.Trainer) -> None:
    from lightning.pytorch.profilers import PassThroughProfiler

    trainer.profiler = PassThroughProfiler()  # Lightning's default instead of lit_gpu's NoProfiler


def _no_fastpath(trainer: pl.Trainer) -> None:
    """The whole of lit_gpu.fastpath off: Lightning's own loop (the fallback) under lit_gpu's stack."""
    _drop(LeanOptimizerStep, LeanTrainingBatch, SkipIdleHooks)(trainer)
    _lightning_profiler(trainer)


#: component -> (extra CLI flags, edit of the built trainer, loader kind, module kind); each
#: switches exactly one piece of the default stack off
COMPONENTS: dict[str, tuple[list[str], Callable[[pl.Trainer], None] | None, str, str]] = {
    "progress_bar": (["--trainer.enable_progress_bar", "false"], None, "tensor", "lit"),
    "csv_logger": (["--loggers", "[tensorboard]"], None, "tensor", "lit"),
    "tensorboard_logger": (["--loggers", "[csv]"], None, "tensor", "lit"),
    "model_summary": (["--trainer.enable_model_summary", "false"], None, "tensor", "lit"),
    "checkpoint": ([], _drop(FreshLastCheckpoint), "tensor", "lit"),
    "nan_guard": ([], _drop(NaNGuard), "tensor", "lit"),
    "rng_state": ([], _drop(RNGStateCallback), "tensor", "lit"),
    "interrupt": ([], _drop(CheckpointOnInterrupt), "tensor", "lit"),
    "run_folder_sync": ([], _drop(RunFolderSync), "tensor", "lit"),
    "speed_levers": ([], _drop(SpeedLevers), "tensor", "lit"),
    "atomic_io": ([], _plain_checkpoint_io, "tensor", "lit"),
    "skip_idle_hooks": ([], _drop(SkipIdleHooks), "tensor", "lit"),
    "lean_step": ([], _drop(LeanOptimizerStep), "tensor", "lit"),
    "lean_batch": ([], _drop(LeanTrainingBatch), "tensor", "lit"),
    "no_profiler": ([], _lightning_profiler, "tensor", "lit"),
    "fastpath": ([], _no_fastpath, "tensor", "lit"),
    "stateful_loader": ([], None, "plain", "lit"),
    "module": ([], None, "tensor", "minimal"),
}


@contextlib.contextmanager
def _in_tempdir() -> Iterator[str]:
    old = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield tmp
        finally:
            os.chdir(old)


def run_lit(
    x: torch.Tensor,
    y: torch.Tensor,
    args: argparse.Namespace,
    off: str | None,
    probe: Any = None,
    pair: pl.Callback | None = None,
) -> Result:
    """The default stack as ``lit-gpu fit`` builds it, with component ``off`` switched off."""
    from lit_gpu.cli import LitGpuCLI

    steps = len(x) // args.batch_size
    flags, edit, loader_kind, module_kind = COMPONENTS[off] if off else ([], None, "tensor", "lit")
    marks = Marks(args.warmup, steps - 1, args.device, probe)
    chatter = io.StringIO()  # the CLI's one-line notes ("keeping last.ckpt only")
    with _in_tempdir(), contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
        argv = [*MODEL_ARGS, *_trainer_flags(args, steps), *flags, *args.lit_flags.split()]
        cli = LitGpuCLI(args=argv, run=False)
        trainer = cli.trainer
        if edit is not None:
            edit(trainer)
        trainer.callbacks.insert(0, MarksCallback(marks))
        if pair is not None:
            trainer.callbacks.insert(0, pair)
        module = cli.model if module_kind == "lit" else MinimalModule(make_net("cpu"))
        loader: Any = (
            TensorLoader(x, y, batch_size=args.batch_size, shuffle=True, drop_last=True, seed=0)
            if loader_kind == "tensor"
            else PlainBatches(x, y, args.batch_size)
        )
        return _timed_fit(trainer, module, loader, marks, args.device)


def run_bare(
    x: torch.Tensor,
    y: torch.Tensor,
    args: argparse.Namespace,
    probe: Any = None,
    pair: pl.Callback | None = None,
) -> Result:
    """Lightning's own floor: minimal module, everything optional off, Lightning's defaults."""
    steps = len(x) // args.batch_size
    marks = Marks(args.warmup, steps - 1, args.device, probe)
    with _in_tempdir():
        trainer = pl.Trainer(
            accelerator="gpu" if args.device == "cuda" else "cpu",
            devices=1,
            max_steps=steps,
            max_epochs=1,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            enable_progress_bar=False,
            logger=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            callbacks=[*([pair] if pair is not None else []), MarksCallback(marks)],
        )
        return _timed_fit(trainer, MinimalModule(make_net("cpu")), PlainBatches(x, y, args.batch_size), marks,
                          args.device)  # fmt: skip


def _timed_fit(trainer: pl.Trainer, module: Any, loader: Any, marks: Marks, device: str) -> Result:
    _sync(device)
    c0, t0 = time.process_time(), time.perf_counter()
    trainer.fit(module, train_dataloaders=loader)
    _sync(device)
    t1 = time.perf_counter()
    return {"wall": t1 - t0, "step": marks.per_step, "cpu": time.process_time() - c0}


# ---- paired: a raw step before every Lightning step ---------------------------------------------
class PairedRaw(pl.Callback):
    """Runs one raw-loop step (own net, own batches) right before each Lightning training step.

    Both are timed in the same fraction of a second, so a machine that speeds up or slows down (a
    shared VM does, by 10 % and more over seconds) moves both alike; the figure is the median of the
    per-step ratios. The Lightning step is the whole loop cycle from the end of the raw step to the
    start of the next step (its other hooks, ``training_step``, the optimizer step, the next batch).
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> None:
        self.net, self.device, self.warmup = make_net(args.device), args.device, args.warmup
        self.at = getattr(args, "pair_at", "start")
        self.opt = sgd(self.net.parameters())
        # its own copy of the data: the Lightning loop prefetches the next batch, which would otherwise
        # bring the rows this raw step reads next into the cache (a raw step 0.1 ms faster than alone)
        self.batches = iter(PlainBatches(x.clone(), y.clone(), args.batch_size))
        self.raw: dict[int, float] = {}
        self.lit: dict[int, float] = {}
        self._lit_start: tuple[int, float] | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.at == "start":
            self._pair(batch_idx)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.at == "end":
            self._pair(batch_idx)

    def _pair(self, batch_idx: int) -> None:
        _sync(self.device)
        now = time.perf_counter()
        if self._lit_start is not None:
            i, t = self._lit_start
            self.lit[i] = now - t
        xb, yb = next(self.batches)
        loss = F.cross_entropy(self.net(xb), yb)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        _sync(self.device)
        done = time.perf_counter()
        self.raw[batch_idx] = done - now
        self._lit_start = (batch_idx, done)

    def pairs(self) -> list[tuple[float, float]]:
        """(Lightning step s, raw step s) of the steps after the warm-up."""
        return [(self.lit[i], self.raw[i]) for i in sorted(self.lit) if i >= self.warmup]


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def paired(x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> None:
    """``--paired``: each Lightning variant with a raw step interleaved before every one of its steps."""
    fns: dict[str, Callable[..., Result]] = {
        "lit_gpu default": lambda x, y, a, pair: run_lit(x, y, a, None, pair=pair),
        "bare Lightning": lambda x, y, a, pair: run_bare(x, y, a, pair=pair),
    }
    for name in args.components:
        fns[f"-{name}"] = lambda x, y, a, pair, name=name: run_lit(x, y, a, name, pair=pair)
    warm = argparse.Namespace(**{**vars(args), "warmup": 5})
    for fn in fns.values():
        fn(x[: 30 * args.batch_size], y[: 30 * args.batch_size], warm, PairedRaw(x, y, warm))
    load_before = load()
    steps: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            pair = PairedRaw(x, y, args)
            fns[name](x, y, args, pair)
            steps[name] += pair.pairs()
        print(f"  repeat {r} (load {load():.2f})", flush=True)
    loads = (load_before, load())
    noisy = max(loads) > args.max_load
    print(f"\nload average (1 min): before {loads[0]:.2f}, after {loads[1]:.2f}")
    print("\n| variant | its step ms | raw step ms (interleaved) | +ms/step | step ratio (paired) |")
    print("|---|---:|---:|---:|---:|")
    for name, pairs in steps.items():
        lit_q = _quantiles([a for a, _ in pairs])
        raw_q = _quantiles([b for _, b in pairs])
        diff_q = _quantiles([a - b for a, b in pairs])
        ratio_q = _quantiles([a / b for a, b in pairs])
        ratio = f"noise: load {max(loads):.2f}" if noisy else "{1:.3f}x ({0:.3f}-{2:.3f})".format(*ratio_q)
        print(
            f"| {name} | {lit_q[1] * 1e3:.3f} | {raw_q[1] * 1e3:.3f} | {diff_q[1] * 1e3:+.3f} "
            f"({diff_q[0] * 1e3:+.3f}-{diff_q[2] * 1e3:+.3f}) | {ratio} |"
        )
    print(
        f"(medians (quartiles) over {len(next(iter(steps.values())))} paired steps per variant: "
        f"{args.repeats} runs x {args.steps - 1 - args.warmup} steps after {args.warmup} warm-up steps)"
    )
    print("\ntarget: lit_gpu default <= 1.02x the raw loop (CPU), <= 1.05x (GPU)")


# ---- probes: Python calls and host-device syncs on the step path --------------------------------
class CallCounter:
    """Counts Python function calls and C calls (``sys.setprofile``) while switched on."""

    def __init__(self) -> None:
        self.py = self.c = 0

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            self.py += 1
        elif event == "c_call":
            self.c += 1

    def start(self) -> None:
        sys.setprofile(self._profile)

    def stop(self) -> None:
        sys.setprofile(None)


class SyncCounter:
    """Counts the host-device synchronizations ``torch.cuda.set_sync_debug_mode("warn")`` reports."""

    def __init__(self) -> None:
        self.count = 0
        self.where: dict[str, int] = {}
        self._catch: Any = None
        self._records: list[warnings.WarningMessage] = []

    def start(self) -> None:
        self._catch = warnings.catch_warnings(record=True)
        self._records = self._catch.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def stop(self) -> None:
        torch.cuda.set_sync_debug_mode("default")
        self._catch.__exit__(None, None, None)
        for w in self._records:
            if "synchroniz" in str(w.message).lower():
                self.count += 1
                key = f"{Path(w.filename).name}:{w.lineno}"
                self.where[key] = self.where.get(key, 0) + 1


# ---- reporting ----------------------------------------------------------------------------------
def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _spread(values: list[float], scale: float = 1.0, fmt: str = ".2f") -> str:
    med = statistics.median(values) * scale
    return f"{med:{fmt}} ({min(values) * scale:{fmt}}-{max(values) * scale:{fmt}})"


def report(runs: dict[str, list[Result]], steps: int, loads: tuple[float, float], max_load: float) -> None:
    noisy = max(loads) > max_load
    note = f"noise: load {max(loads):.2f}" if noisy else ""
    print(f"\nload average (1 min): before {loads[0]:.2f}, after {loads[1]:.2f}")
    print("\n| variant | wall s | wall ratio | step ms | step ratio | +ms/step vs raw | CPU s | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    raw = runs["raw"]
    for name, values in runs.items():
        pairs = list(zip(values, raw, strict=True))
        cells = [_spread([v["wall"] for v in values])]
        cells.append(note or _spread([v["wall"] / w["wall"] for v, w in pairs], fmt=".3f") + "x")
        cells.append(_spread([v["step"] for v in values], 1e3, ".3f"))
        cells.append(note or _spread([v["step"] / w["step"] for v, w in pairs], fmt=".3f") + "x")
        cells.append(_spread([v["step"] - w["step"] for v, w in pairs], 1e3, "+.3f"))
        cells.append(_spread([v["cpu"] for v in values]))
        cells.append(note or _spread([v["cpu"] / w["cpu"] for v, w in pairs], fmt=".3f") + "x")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        "(median (min-max) over the repeats; ratios: medians of the per-repeat ratios to the raw loop;\n"
        f" step: per training step on the step path, {steps} steps per run)"
    )
    if "lit_gpu default" in runs and not noisy:
        default = runs["lit_gpu default"]
        print("\ncost of each component (default - default without it), per step:")
        for name, values in runs.items():
            if name.startswith("-"):
                diffs = [d["step"] - v["step"] for d, v in zip(default, values, strict=True)]
                print(f"  {name[1:]:<20} {_spread(diffs, 1e3, '+.3f')} ms")
    print("\ntarget: lit_gpu default <= 1.02x the raw loop (CPU), <= 1.05x (GPU)")


def variants(args: argparse.Namespace) -> dict[str, Callable[..., Result]]:
    found: dict[str, Callable[..., Result]] = {
        "raw": run_raw,
        "lit_gpu default": lambda x, y, a, probe=None: run_lit(x, y, a, None, probe),
        "bare Lightning": run_bare,
    }
    for name in args.components:
        found[f"-{name}"] = lambda x, y, a, probe=None, name=name: run_lit(x, y, a, name, probe)
    return found


def count_calls(x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> None:
    steps = len(x) // args.batch_size
    print("\n| variant | Python calls / step | C calls / step |")
    print("|---|---:|---:|")
    base = None
    for name, fn in variants(args).items():
        counter = CallCounter()
        fn(x, y, args, probe=counter)
        n = steps - 1 - args.warmup
        py, c = counter.py / n, counter.c / n
        if name == "lit_gpu default":
            base = (py, c)
        extra = (
            f" (component: {base[0] - py:+.0f} / {base[1] - c:+.0f})" if name.startswith("-") and base else ""
        )
        print(f"| {name} | {py:.0f} | {c:.0f} |{extra}")
    print("(counted with sys.setprofile on the measured steps; independent of machine load)")


def count_syncs(x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> None:
    steps = len(x) // args.batch_size
    n = steps - 1 - args.warmup
    print("\n| variant | host-device syncs / step | where (file:line: count) |")
    print("|---|---:|---|")
    for name, fn in variants(args).items():
        counter = SyncCounter()
        fn(x, y, args, probe=counter)
        where = ", ".join(f"{k}: {v}" for k, v in sorted(counter.where.items(), key=lambda kv: -kv[1])[:6])
        print(f"| {name} | {counter.count / n:.2f} | {where or '-'} |")
    print('(torch.cuda.set_sync_debug_mode("warn") on the measured steps)')


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=BATCH)
    parser.add_argument("--warmup", type=int, default=20, help="steps left out of the step figure")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--components",
        default="all",
        help="switch these off one at a time (comma-separated), 'all' or 'none': " + ", ".join(COMPONENTS),
    )
    parser.add_argument("--max-load", type=float, default=MAX_LOAD, help="no ratios above this load average")
    parser.add_argument("--count-calls", action="store_true", help="Python calls per step instead of timing")
    parser.add_argument(
        "--lit-flags",
        default="",
        help="more lit-gpu flags for every lit_gpu variant, e.g. '--speed.cuda_graph true' (one string)",
    )
    parser.add_argument(
        "--paired", action="store_true", help="a raw step before every Lightning step; per-step paired ratios"
    )
    parser.add_argument(
        "--pair-at",
        choices=["start", "end"],
        default="start",
        help="--paired: run the raw step in on_train_batch_start (between the Lightning step's fetch and its "
        "forward) or in on_train_batch_end (between its optimizer step and the next fetch)",
    )
    args = parser.parse_args()
    for name in ("lightning.pytorch", "lightning.fabric"):  # start-up banners, tips
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")  # the sync count records its own warnings
    if args.components == "all":
        args.components = [] if args.device == "cuda" else list(COMPONENTS)
    elif args.components == "none":
        args.components = []
    else:
        args.components = [c.strip() for c in args.components.split(",") if c.strip()]
        unknown = set(args.components) - set(COMPONENTS)
        if unknown:
            parser.error(f"unknown components {sorted(unknown)}; choose from {', '.join(COMPONENTS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(
            "overhead.py: --device cuda needs a CUDA GPU and torch sees none "
            "(torch.cuda.is_available() is False); run it on a GPU machine or drop --device cuda"
        )
    if args.steps <= args.warmup + 2:
        parser.error("--steps must exceed --warmup by at least 2")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {machine()}")
    print(
        f"# FastMnistNet(12, 24, k=5), SGD, batch {args.batch_size}, {args.steps} steps, device {args.device}"
    )
    x, y = make_data(args.steps, args.batch_size, args.device)
    if args.count_calls:
        count_calls(x, y, args)
        return
    if args.paired:
        paired(x, y, args)
        return
    fns = variants(args)
    for fn in fns.values():  # warm-up: imports, first-call costs, allocator
        fn(
            x[: 30 * args.batch_size],
            y[: 30 * args.batch_size],
            argparse.Namespace(**{**vars(args), "warmup": 5}),
        )
    load_before = load()
    runs: dict[str, list[Result]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(args.repeats):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotated: no variant always first
        for name in order:
            runs[name].append(fns[name](x, y, args))
        print(
            f"  repeat {r} (load {load():.2f}): "
            + ", ".join(f"{k} {v[-1]['step'] * 1e3:.2f} ms" for k, v in runs.items()),
            flush=True,
        )
    report(runs, args.steps, (load_before, load()), args.max_load)
    if args.device == "cuda":
        count_syncs(x, y, args)


if __name__ == "__main__":
    main()
