"""lit_gpu's overhead over a raw PyTorch loop: same net, same tensors, same batches, same steps.

    python benchmarks/overhead.py [--steps 400] [--repeats 5] [--threads 1] [--device cuda]

``--device cuda``: the net, the optimizer and the data (resident, as one tensor) on the GPU in every
loop; each timing ends with ``torch.cuda.synchronize()``.

Three variants, interleaved per repeat (raw, lit default, lit bare, ...) so that machine load hits
all of them alike; the medians are compared:

* raw: ``for x, y in loader: loss = F.cross_entropy(net(x), y); zero_grad; backward; step``;
* lit_gpu default: ``ClassificationModule`` + ``Trainer`` with lit_gpu's progress bar
  (:func:`lit_gpu.callbacks.progress.default_progress_bar`: redrawn 4x a second), lit_gpu's default
  loggers (CSV + TensorBoard into one ``ROOT/lit_gpu/version_N``, :func:`lit_gpu.runs.make_loggers`),
  model summary and checkpointing, as ``lit-gpu fit`` runs it;
* lit_gpu before: the stack ``lit-gpu fit`` ran before issue 11: CSV logger only, and Lightning's
  default progress bar (``RichProgressBar(refresh_rate=100)``: a thread redrawing 100x a second);
* lit_gpu bare: progress bar, logger, model summary and checkpointing off.

Both loops iterate the same :class:`~lit_gpu.data.tensor_loader.TensorLoader`. The module's extra
work (train accuracy metric, loss logging) counts as lit_gpu overhead. Wall time covers the whole
``trainer.fit`` call (trainer start-up included); "steady" leaves out the first ``--warmup`` steps;
"CPU s" is this process's CPU time (``time.process_time``) for the whole run, which other jobs on
a shared machine disturb far less than wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recipe import machine  # noqa: E402

from lit_gpu import runs as lit_runs  # noqa: E402
from lit_gpu.callbacks.progress import default_progress_bar  # noqa: E402
from lit_gpu.data.tensor_loader import TensorLoader  # noqa: E402
from lit_gpu.modules import ClassificationModule  # noqa: E402
from lit_gpu.nets import FastMnistNet  # noqa: E402


def make_data(steps: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed random MNIST-shaped tensors, exactly ``steps`` batches."""
    g = torch.Generator().manual_seed(0)
    n = steps * batch_size
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def loader(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> TensorLoader:
    return TensorLoader(x, y, batch_size=batch_size, shuffle=True, drop_last=True, seed=0)


CHANNELS_LAST = False
DEVICE = torch.device("cpu")


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def make_net() -> FastMnistNet:
    torch.manual_seed(0)
    net = FastMnistNet(12, 24, kernel_size=5).to(DEVICE)
    return net.to(memory_format=torch.channels_last) if CHANNELS_LAST else net


def sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)


def run_raw(x: torch.Tensor, y: torch.Tensor, batch_size: int, warmup: int) -> tuple[float, float, float]:
    net = make_net()
    opt = sgd(net.parameters())
    net.train()
    c0, t0 = time.process_time(), time.perf_counter()
    t_warm = t0
    for i, (xb, yb) in enumerate(loader(x, y, batch_size)):
        if i == warmup:
            t_warm = time.perf_counter()
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    _sync()
    t1 = time.perf_counter()
    return t1 - t0, t1 - t_warm, time.process_time() - c0


class _StepClock(pl.Callback):
    """Time stamp at the start of batch ``warmup`` (for the steady-state figure only)."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.t_warm = warmup, 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.warmup:
            self.t_warm = time.perf_counter()


def run_lit(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, warmup: int, bare: bool, before: bool = False
) -> tuple[float, float, float]:
    steps = len(x) // batch_size
    module = ClassificationModule(make_net(), optimizer=sgd)
    clock = _StepClock(warmup)
    with tempfile.TemporaryDirectory() as tmp:
        if bare:
            flags = dict(
                enable_progress_bar=False,
                logger=False,
                enable_model_summary=False,
                enable_checkpointing=False,
            )
        else:
            kinds = ("csv",) if before else lit_runs.LOGGER_KINDS
            flags = dict(logger=lit_runs.make_loggers(kinds, lit_runs.RunFolder(tmp)), default_root_dir=tmp)
        flags["callbacks"] = [clock] if bare or before else [clock, default_progress_bar()]
        trainer = pl.Trainer(
            accelerator="gpu" if DEVICE.type == "cuda" else "cpu",
            devices=1,
            max_steps=steps,
            max_epochs=1,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            **flags,
        )
        c0, t0 = time.process_time(), time.perf_counter()
        trainer.fit(module, train_dataloaders=loader(x, y, batch_size))
        _sync()
        t1 = time.perf_counter()
    return t1 - t0, t1 - clock.t_warm, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    parser.add_argument("--channels-last", action="store_true", help="NHWC net and inputs in both loops")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where every loop runs")
    args = parser.parse_args()
    global CHANNELS_LAST, DEVICE
    CHANNELS_LAST = args.channels_last
    DEVICE = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {machine()}")
    print(
        f"# FastMnistNet(12, 24, k=5), channels_last={CHANNELS_LAST}, SGD, batch {args.batch_size}, "
        f"{args.steps} steps, x{args.repeats}, device {DEVICE}"
    )
    x, y = make_data(args.steps, args.batch_size)
    x, y = x.to(DEVICE), y.to(DEVICE)  # resident on the device: no host-to-device copy in any loop
    if CHANNELS_LAST:
        x = x.contiguous(memory_format=torch.channels_last)
    names = ("raw", "lit_gpu default", "lit_gpu before", "lit_gpu bare")
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    for r in range(args.repeats):
        runs["raw"].append(run_raw(x, y, args.batch_size, args.warmup))
        runs["lit_gpu default"].append(run_lit(x, y, args.batch_size, args.warmup, bare=False))
        runs["lit_gpu before"].append(run_lit(x, y, args.batch_size, args.warmup, bare=False, before=True))
        runs["lit_gpu bare"].append(run_lit(x, y, args.batch_size, args.warmup, bare=True))
        print(f"  repeat {r}: " + ", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in runs.items()), flush=True)
    print("\n| loop | wall s | wall ratio | steady s | steady ratio | CPU s | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, values in runs.items():
        med = [statistics.median(v[i] for v in values) for i in range(3)]
        # ratio: median over repeats of (this loop / the raw loop of the same repeat), run back to back
        pairs = list(zip(values, runs["raw"], strict=True))
        ratio = [statistics.median(v[i] / w[i] for v, w in pairs) for i in range(3)]
        cells = " | ".join(f"{m:.2f} | {q:.3f}x" for m, q in zip(med, ratio, strict=True))
        print(f"| {name} | {cells} |")
    print("(seconds: medians over the repeats; ratios: medians of the per-repeat ratios to raw)")
    print("\ntarget: lit_gpu <= 1.05x the raw loop")


if __name__ == "__main__":
    main()
