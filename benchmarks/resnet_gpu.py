"""ResNet-18 on CIFAR-shaped images: lit_gpu's recipe against the best loops written by hand, in one run.

    python benchmarks/resnet_gpu.py                         # on a GPU: batch 256, 6 workers
    python benchmarks/resnet_gpu.py --device cpu --steps 3 --warmup 1 --batch-size 8 --num-samples 256
    python benchmarks/resnet_gpu.py --device cpu --net one_layer --workers 2 --steps 150 --warmup 20 \
        --repeats 5 --only tuned lit_gpu_eager       # the host glue a step: compare the CPU column

Every contestant trains torchvision's ResNet-18 (:class:`lit_gpu.nets.ResNet18`, CIFAR stem) on the same
images (:class:`lit_gpu.data.SyntheticImageDataModule`: uint8 in host memory, per-sample crop/flip
augmentation of the uint8 pixels, normalized on the device after the copy) in the same order (lit_gpu's
loader's first-epoch order). The
contestants (``benchmarks/_contestants.py`` says each): ``tuned`` (eager, every lever), ``hand_graph``
(the tuned loop with its whole step captured as one CUDA graph), ``compile`` (``torch.compile(mode=
"max-autotune")``), ``lit_gpu`` (``lit-gpu fit --config lit_gpu:resnet_gpu``: whole-step capture),
``lit_gpu_eager`` (the same, ``--speed.cuda_graph false``); ``naive`` (the seeds' first loop) on request.
On a CPU the capture and compile contestants are skipped, each with its reason.

Each contestant runs ``--warmup`` steps, then ``--steps`` timed ones (GPU synchronized at both ends);
contestants are interleaved ``--repeats`` times (``compile`` last in a round: its first compile is the
longest wait) and the median reported. Per contestant: images/s, GPU busy (NVML's utilization, sampled
every 20 ms in the timed window: the share of time a kernel ran), the main process's CPU time per step,
and the time from building it to its first timed step (first round / later rounds). Goals (issue 52):
lit_gpu >= 0.97x the best hand-written contestant, lit_gpu_eager >= 0.97x tuned.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _contestants import HAND, interleaved, make_data, rate, steady  # noqa: E402
from _recipe import machine  # noqa: E402

DEFAULT = ["tuned", "hand_graph", "lit_gpu", "lit_gpu_eager", "compile"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    p.add_argument("--steps", type=int, default=150, help="timed steps per contestant")
    p.add_argument("--warmup", type=int, default=30, help="untimed steps first (cuDNN's choices, workers)")
    p.add_argument("--repeats", type=int, default=2, help="rounds of the contestants, interleaved")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=6, help="DataLoader workers of the tuned loops and lit_gpu")
    p.add_argument("--num-samples", type=int, default=50000)
    p.add_argument("--only", nargs="+", default=DEFAULT, choices=["naive", *DEFAULT])
    p.add_argument(
        "--net", choices=["resnet18", "one_layer"], default="resnet18",
        help="one_layer: a linear classifier, so the host CPU a step is the loop's glue",
    )  # fmt: skip
    p.add_argument("lit_args", nargs="*", help="more lit-gpu flags after --, e.g. -- --speed.cuda_graph true")
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    args.image_size = 32
    if args.net == "one_layer":  # lit_gpu builds the same net from its class path
        args.lit_args = [*args.lit_args, "--model.net", "_contestants.OneLayer"]
    needed = (args.warmup + args.steps) * args.batch_size
    if needed > args.num_samples:
        p.error(f"--num-samples must hold the {needed} images of warmup + steps (one epoch)")
    print(f"# {machine()}")
    steps = f"{args.warmup} + {args.steps} steps"
    print(
        f"# {'ResNet-18' if args.net == 'resnet18' else 'one layer'}, 32x32, "
        f"batch {args.batch_size}, {args.workers} workers, {steps}, "
        f"x{args.repeats} interleaved"
    )
    data = make_data(args, args.num_samples)
    names = [n for n in args.only if n != "compile"] + [n for n in args.only if n == "compile"]
    load_before = os.getloadavg()[0]
    results, skipped = interleaved(names, data, args)
    load_after = os.getloadavg()[0]
    report(results, skipped)
    print(f"\nload average before {load_before:.2f}, after {load_after:.2f} ({os.cpu_count()} cores)")


def report(results: dict[str, list[dict]], skipped: dict[str, str]) -> None:
    """The table, and the goals where their contestants ran."""
    median = {n: statistics.median(r["images_s"] for r in rs) for n, rs in results.items()}
    hand = {n: v for n, v in median.items() if n in HAND and n != "naive"}
    best = max(hand, key=hand.get) if hand else None
    print(
        "\n| contestant | images/s (median) | GPU busy | host CPU / step | to steady (first / later) "
        f"| vs tuned | vs best hand-written ({best or '-'}) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rs in results.items():
        busy = [r["busy"] for r in rs if r["busy"] is not None]
        busy_s = f"{statistics.median(busy):.0f} %" if busy else "n/a"
        cpu = statistics.median(r["cpu_ms"] for r in rs)
        vs_t = f"{median[name] / median['tuned']:.3f}x" if "tuned" in median else "-"
        vs_b = f"{median[name] / hand[best]:.3f}x" if best else "-"
        print(f"| {name} | {rate(median[name])} | {busy_s} | {cpu:.2f} ms | {steady(rs)} | {vs_t} | {vs_b} |")
    for name, why in skipped.items():
        print(f"| {name} | skipped: {why} | | | | | |")
    if "lit_gpu" in median and best:
        ok = median["lit_gpu"] >= 0.97 * hand[best]
        print(f"goal (lit_gpu >= 0.97x the best hand-written, {best}): {'MET' if ok else 'MISSED'}")
    if {"lit_gpu_eager", "tuned"} <= set(median):
        ok = median["lit_gpu_eager"] >= 0.97 * median["tuned"]
        print(f"goal (lit_gpu_eager >= 0.97x tuned): {'MET' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
