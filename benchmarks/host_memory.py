"""What ``--speed.keep_host_memory`` (on by default) saves: page faults and time of a CPU training step.

    python benchmarks/host_memory.py [--steps 200] [--repeats 4] [--threads 1] [--batch-size 128]

Each run is a fresh process (glibc's malloc settings are per process) running the raw PyTorch loop of
``benchmarks/overhead.py`` (``FastMnistNet(12, 24, k=5)``, SGD, random MNIST-shaped batches, sliced
by index) with glibc's defaults or after :func:`lit_gpu.callbacks.speed.keep_freed_host_memory`. The
two kinds alternate, in a rotated order each repeat. Per run: milliseconds and minor page faults per
step after ``--warmup`` steps. The load average is printed before and after; above ``--max-load``
(1.5) the ratio is marked noise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LOAD = 1.5


def child(keep: bool, args: argparse.Namespace) -> dict[str, float]:
    """Inside a fresh process: the raw loop, timed and counted after the warm-up."""
    import torch
    from torch.nn import functional as F

    sys.path.insert(0, str(REPO))
    from lit_gpu.callbacks.speed import keep_freed_host_memory
    from lit_gpu.nets import FastMnistNet

    torch.set_num_threads(args.threads)
    kept = keep_freed_host_memory() if keep else False
    g = torch.Generator().manual_seed(0)
    n = args.steps * args.batch_size
    x, y = torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
    order = torch.randperm(n, generator=g)
    torch.manual_seed(0)
    net = FastMnistNet(12, 24, kernel_size=5)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    t0 = faults0 = 0.0
    for i in range(args.steps):
        if i == args.warmup:
            t0, faults0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        idx = order[i * args.batch_size : (i + 1) * args.batch_size]
        loss = F.cross_entropy(net(x.index_select(0, idx)), y.index_select(0, idx))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    steps = args.steps - args.warmup
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    return {"ms": (time.perf_counter() - t0) / steps * 1e3, "faults": faults / steps, "kept": kept}


def run(keep: bool, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", "keep" if keep else "default"]
    cmd += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    cmd += ["--batch-size", str(args.batch_size)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def spread(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-load", type=float, default=MAX_LOAD)
    parser.add_argument("--child", choices=["keep", "default"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child == "keep", args)))
        return
    load_before = os.getloadavg()[0]
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for r in range(args.repeats):
        for keep in (False, True) if r % 2 == 0 else (True, False):
            runs[keep].append(run(keep, args))
        print(
            f"  repeat {r}: "
            + ", ".join(f"{'keep' if k else 'default'} {v[-1]['ms']:.2f} ms" for k, v in runs.items())
        )
    load_after = os.getloadavg()[0]
    print(f"\nload average (1 min): before {load_before:.2f}, after {load_after:.2f}")
    print(f"FastMnistNet(12, 24, k=5), batch {args.batch_size}, {args.threads} thread(s), "
          f"{args.steps - args.warmup} steps a run, {args.repeats} runs each")  # fmt: skip
    print("\n| glibc malloc | ms / step | minor page faults / step |")
    print("|---|---:|---:|")
    for keep, name in ((False, "defaults"), (True, "keep_host_memory")):
        ms, faults = spread([v["ms"] for v in runs[keep]]), spread([v["faults"] for v in runs[keep]], ".0f")
        print(f"| {name} | {ms} | {faults} |")
    if not all(v["kept"] for v in runs[True]):
        print("\n(this C library is not glibc: keep_host_memory changed nothing)")
    if max(load_before, load_after) > args.max_load:
        print(f"\nratio: noise: load {max(load_before, load_after):.2f} (not reported above {args.max_load})")
    else:
        ratios = [k["ms"] / d["ms"] for k, d in zip(runs[True], runs[False], strict=True)]
        print(f"\nstep time keep / defaults = {spread(ratios, '.3f')}x (per-repeat pairs)")


if __name__ == "__main__":
    main()
