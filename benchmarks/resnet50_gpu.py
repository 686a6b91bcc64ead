"""A GPU-bound step: ResNet-50 on 224x224 images, lit_gpu's recipe against the hand-written loop and the peak.

    python benchmarks/resnet50_gpu.py                      # on a GPU: batch by the rule below, 6 workers
    python benchmarks/resnet50_gpu.py --device cpu --image-size 32 --batch-size 2 --steps 1 --warmup 1

torchvision's ResNet-50 (:class:`lit_gpu.nets.ResNet50`, ImageNet stem) on synthetic 224x224 images
(:class:`lit_gpu.data.SyntheticImageDataModule`: uint8 in host memory, crop/flip augmentation in the
loader's workers, uint8 batches copied to the GPU and normalized there), bf16 autocast, channels-last,
fused AdamW, OneCycle, one epoch.
Contestants (``benchmarks/_contestants.py``): ``tuned`` (the hand-written eager loop), ``lit_gpu``
(``lit-gpu fit --config lit_gpu:resnet_gpu`` with ``--model.net lit_gpu.nets.ResNet50`` and
``--data.image_size 224``: the recipe, whole-step capture included); ``hand_graph`` and
``lit_gpu_eager`` (which runs on a CPU) on request.

Reported, besides images/s per contestant (interleaved rounds, median):

* **batch**: sized to the card by a rule (``--batch-size 0``, the default on CUDA): one probe step at
  batch 32 gives the memory a sample takes beyond the weights and optimizer state; the batch is the
  largest power of two whose step fits in 60 % of the free memory, at most ``--max-batch`` (256: it
  bounds the synthetic images, ``(warmup + steps) x batch`` of them, made in host memory);
* **achieved fraction of peak**: FLOPs of one training step (forward and backward) counted by
  ``torch.utils.flop_counter.FlopCounterMode``, times steps/s, over the card's dense bf16 peak
  (:data:`PEAK_BF16_TFLOPS`);
* **the data path's limit**: images/s the training loader alone delivers (lit_gpu's loader, the
  shipped workers, pinned memory), to compare with what the step consumes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _contestants import interleaved, make_data, make_net, rate, steady  # noqa: E402
from _recipe import machine  # noqa: E402
from image_loader import images_per_s  # noqa: E402

#: dense (no sparsity) bf16 tensor-core peak in TFLOP/s, by a part of ``torch.cuda.get_device_name``.
#: NVIDIA's datasheets give the figure "with sparsity"; dense is half of it: H100 SXM 1,979 -> 989 and
#: H100 PCIe 1,513 -> 756 (NVIDIA H100 Tensor Core GPU datasheet), H200 SXM 1,979 -> 989 (NVIDIA H200
#: Tensor Core GPU datasheet), A100 312 dense (NVIDIA A100 Tensor Core GPU datasheet). An H100 SXM
#: names itself "NVIDIA H100 80GB HBM3"; NVL parts differ and are left out (no fraction reported).
PEAK_BF16_TFLOPS = (("H200 NVL", None), ("H200", 989.0), ("H100 NVL", None), ("H100 PCIE", 756.0),
                    ("H100 80GB HBM3", 989.0), ("H100 SXM", 989.0), ("A100", 312.0))  # fmt: skip

PROBE_BATCH = 32
MEMORY_SHARE = 0.6


def peak_tflops(device_name: str) -> float | None:
    """The card's dense bf16 peak (TFLOP/s) from :data:`PEAK_BF16_TFLOPS`, or None for a card not listed."""
    name = device_name.upper()
    return next((peak for part, peak in PEAK_BF16_TFLOPS if part in name), None)


def _train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, x, y, device) -> None:
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _batch(args: argparse.Namespace, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 3, args.image_size, args.image_size, device=device)
    return x.to(memory_format=torch.channels_last), torch.randint(0, 10, (n,), device=device)


def step_flops(args: argparse.Namespace, batch: int) -> int:
    """FLOPs of one training step (forward + backward; FlopCounterMode counts matmuls and convolutions)."""
    device = torch.device(args.device)
    model = make_net(args).to(device, memory_format=torch.channels_last)
    x, y = _batch(args, batch, device)
    with FlopCounterMode(display=False) as counter:
        _train_step(model, None, x, y, device)
    return counter.get_total_flops()


def batch_by_rule(args: argparse.Namespace) -> tuple[int, str]:
    """The largest power of two <= ``--max-batch`` whose step fits in 60 % of the free GPU memory; and why."""
    device = torch.device("cuda")
    free, _ = torch.cuda.mem_get_info()
    model = make_net(args).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    x, y = _batch(args, PROBE_BATCH, device)
    _train_step(model, optimizer, x, y, device)  # the optimizer's state exists from here
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    _train_step(model, optimizer, x, y, device)
    torch.cuda.synchronize()
    per_sample = (torch.cuda.max_memory_allocated() - base) / PROBE_BATCH
    del model, optimizer, x, y
    torch.cuda.empty_cache()
    fits = int((MEMORY_SHARE * free - base) // per_sample)
    batch = 1 << (max(1, min(fits, args.max_batch)).bit_length() - 1)
    why = (
        f"{per_sample / 2**20:.0f} MiB a sample beyond {base / 2**30:.2f} GiB of weights and optimizer "
        f"state (probe at batch {PROBE_BATCH}); {MEMORY_SHARE:.0%} of {free / 2**30:.1f} GiB free fits "
        f"{fits}; power of two, at most {args.max_batch}"
    )
    return batch, why


def loader_limit(data, args: argparse.Namespace) -> float:
    """Images/s of lit_gpu's data path alone, first batch aside: its training loader (workers, pinned memory
    on CUDA), the copy to the device and the normalization there (``on_after_batch_transfer``)."""
    from lit_gpu.data import SyntheticImageDataModule

    probe = SyntheticImageDataModule(
        num_samples=data.num_samples,
        image_size=data.image_size,
        batch_size=data.batch_size,
        num_workers=data.num_workers,
        pin_memory=args.device == "cuda",
        seed=data.seed,
    )
    probe.train_set = data.train_set  # the same images; setup() then makes none
    n = min(args.loader_batches, len(data.train_set) // data.batch_size - 1)
    timing = argparse.Namespace(device=args.device, warmup=1, batches=n, batch_size=data.batch_size)
    return images_per_s("lit_gpu", probe, timing)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=0, help="0: by the rule (CUDA only)")
    p.add_argument("--max-batch", type=int, default=256, help="the rule's largest batch")
    p.add_argument("--steps", type=int, default=20, help="timed steps per contestant")
    p.add_argument("--warmup", type=int, default=8, help="untimed steps first (cuDNN's choices, capture)")
    p.add_argument("--repeats", type=int, default=2, help="rounds of the contestants, interleaved")
    p.add_argument("--workers", type=int, default=6, help="DataLoader workers of the tuned loop and lit_gpu")
    p.add_argument("--loader-batches", type=int, default=15, help="batches the loader-alone figure times")
    p.add_argument(
        "--only",
        nargs="+",
        default=["tuned", "lit_gpu"],
        choices=["tuned", "hand_graph", "lit_gpu", "lit_gpu_eager"],
    )
    p.add_argument("lit_args", nargs="*", help="more lit-gpu flags after --")
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    args.net = "resnet50"
    print(f"# {machine()}")
    if args.batch_size <= 0:
        if args.device != "cuda":
            p.error("--batch-size 0 (by the rule) needs CUDA: give a batch size on a CPU")
        args.batch_size, why = batch_by_rule(args)
        print(f"# batch {args.batch_size} by the rule: {why}")
    total = args.warmup + args.steps
    size = f"{args.image_size}x{args.image_size}"
    print(f"# ResNet-50, {size}, batch {args.batch_size}, {args.workers} workers, "
          f"{args.warmup} + {args.steps} steps, x{args.repeats} interleaved")  # fmt: skip
    t0 = time.perf_counter()
    data = make_data(args, total * args.batch_size)
    print(f"# {total * args.batch_size} images made in {time.perf_counter() - t0:.1f} s")
    flops = step_flops(args, args.batch_size) / args.batch_size
    print(f"# {flops / 1e9:.2f} GFLOP per image per training step (FlopCounterMode, forward + backward)")
    try:
        loader = loader_limit(data, args)
    except Exception as err:  # e.g. too little shared memory for the workers' batches: the steps will say
        traceback.print_exc(file=sys.stdout)
        print(f"# the loader alone failed: {type(err).__name__}")
        loader = float("nan")
    print(
        f"# the loader alone: {rate(loader)} images/s ({args.workers} workers, "
        f"pinned: {args.device == 'cuda'})"
    )
    load_before = os.getloadavg()[0]
    lit_more = [
        "--model.net",
        "lit_gpu.nets.ResNet50",
        "--model.net.cifar_stem",
        str(args.image_size <= 64).lower(),
    ]
    results, skipped = interleaved(args.only, data, args, lit_more)
    load_after = os.getloadavg()[0]
    report(results, skipped, flops, loader, args)
    print(f"\nload average before {load_before:.2f}, after {load_after:.2f} ({os.cpu_count()} cores)")


def report(results: dict, skipped: dict, flops: float, loader: float, args: argparse.Namespace) -> None:
    """The table; the goals where their contestants ran."""
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    peak = peak_tflops(name) if args.device == "cuda" else None
    print(f"\ndense bf16 peak of {name}: {f'{peak:.0f} TFLOP/s' if peak else 'not listed'}")
    median = {n: statistics.median(r["images_s"] for r in rs) for n, rs in results.items()}
    print("\n| contestant | images/s (median) | TFLOP/s | of dense bf16 peak | GPU busy | to steady "
          "(first / later) | vs tuned |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n, rs in results.items():
        tflops = median[n] * flops / 1e12
        share = f"{tflops / peak:.1%}" if peak else "n/a"
        busy = [r["busy"] for r in rs if r["busy"] is not None]
        busy_s = f"{statistics.median(busy):.0f} %" if busy else "n/a"
        vs = f"{median[n] / median['tuned']:.3f}x" if "tuned" in median else "-"
        print(f"| {n} | {rate(median[n])} | {tflops:.1f} | {share} | {busy_s} | {steady(rs)} | {vs} |")
    for n, why in skipped.items():
        print(f"| {n} | skipped: {why} | | | | | |")
    if median and loader == loader:  # not NaN: the loader's figure exists
        fastest = max(median.values())
        verdict = "more" if loader > fastest else "FEWER"
        print(f"the loader alone: {rate(loader)} images/s, {loader / fastest:.2f}x the fastest step's "
              f"consumption ({verdict} than the step consumes)")  # fmt: skip
    if {"lit_gpu", "tuned"} <= set(median):
        ok = median["lit_gpu"] >= 0.97 * median["tuned"]
        print(f"goal (lit_gpu >= 0.97x the hand-written loop): {'MET' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
