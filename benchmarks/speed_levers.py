"""Each speed lever of ``--speed.*`` (and bf16) measured on the same job, through ``lit-gpu bench``'s runner.

    python benchmarks/speed_levers.py [--steps 150] [--repeats 2] [--data-dir ../shared/data]

Every variant runs in its own subprocess via :mod:`lit_gpu.commands.bench` (Lightning ``ThroughputMonitor``
rates after ``--warmup`` steps; warm-up time, where ``torch.compile`` pays, is reported apart).
Variants are interleaved per repeat; the table shows medians and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recipe import DEFAULT_DATA, REPO, machine  # noqa: E402

from lit_gpu.commands.bench import plan_mode, run_mode  # noqa: E402

BASE = ["--speed.num_threads", "1"]
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "baseline (fp32, NCHW, 1 thread)": ("cpu", []),
    "channels_last": ("cpu", ["--speed.channels_last", "true"]),
    "bf16-mixed": ("bf16", []),
    "channels_last + bf16-mixed": ("bf16", ["--speed.channels_last", "true"]),
    "torch.compile": ("cpu", ["--speed.compile", "true"]),
    "channels_last + torch.compile": ("cpu", ["--speed.channels_last", "true", "--speed.compile", "true"]),
    "matmul_precision high": ("cpu", ["--speed.matmul_precision", "high"]),
    "2 threads": ("cpu", ["--speed.num_threads", "2"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(REPO / "configs" / "mnist_fast.yaml"))
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="variant names to run (default: all)")
    args = parser.parse_args()
    print(f"# {machine()}")
    job = ["--config", args.config, "--data.data_dir", args.data_dir, "--data.download", "false"]
    job += ["--speed.channels_last", "false", *BASE]
    names = [n for n in VARIANTS if not args.only or n in args.only]
    rates: dict[str, list[float]] = {n: [] for n in names}
    warm: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names:
            mode, extra = VARIANTS[name]
            result = run_mode(plan_mode(mode), job + extra, args.steps, args.warmup, timeout=900)
            if result.samples_per_sec:
                rates[name].append(result.samples_per_sec)
                warm[name].append(result.warmup_s or 0.0)
            print(
                f"  repeat {r} {name}: {result.samples_per_sec or 0:.0f} samples/s, "
                f"warm-up {result.warmup_s or 0:.2f} s {result.status}",
                flush=True,
            )
    base = statistics.median(rates[names[0]]) if rates[names[0]] else None
    print(f"\n| variant | samples/s (runs) | median | vs baseline | warm-up s ({args.warmup} steps) |")
    print("|---|---|---:|---:|---:|")
    for name in names:
        if not rates[name]:
            print(f"| {name} | failed | - | - | - |")
            continue
        med = statistics.median(rates[name])
        ratio = f"{med / base:.2f}x" if base else "-"
        runs = ", ".join(f"{v:.0f}" for v in rates[name])
        print(f"| {name} | {runs} | {med:.0f} | {ratio} | {statistics.median(warm[name]):.2f} |")
    if not torch.cuda.is_available():
        print("| TF32 (matmul_precision high on Ampere+) | not measurable here: no CUDA device | - | - | - |")


if __name__ == "__main__":
    main()
