"""Where lit_gpu's eager step spends its host time beyond the tuned loop's: cProfile over the timed steps.

    python benchmarks/glue_profile.py                   # on a GPU: ResNet-18, batch 256, as resnet_gpu.py
    python benchmarks/glue_profile.py --device cpu --batch-size 2 --steps 3 --warmup 1 --workers 1

The tuned eager loop and ``lit_gpu_eager`` (``lit-gpu fit --config lit_gpu:resnet_gpu --speed.cuda_graph
false``; ``benchmarks/_contestants.py``) run the ResNet-18 step of ``resnet_gpu.py`` with ``cProfile``
switched on for exactly the timed steps, in the main process (where the host-side glue runs), timing
the main thread's CPU time (``--timer thread``; ``wall`` counts waits too). Reported per step: own time
by where the code lives (Lightning, lit_gpu, torch's Python, torch's C calls: kernel launches and
autograd, the benchmark, the rest) for both, and the difference; the C calls (a kernel launch is one)
by the code that made them, and those that Lightning, lit_gpu and torchmetrics make (the kernels the
glue adds); then the functions of those three with the most own time and the most time under them
(the hooks and loops a step passes through). On a CPU the glue is the same code as on a GPU: the
split of it is the figure to read there (the arithmetic dominates the totals). cProfile slows Python
code down more than C calls, so the per-step times are above an unprofiled run's; compare them with
each other.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _contestants import make_data, run_contestant  # noqa: E402
from _recipe import machine  # noqa: E402

CONTESTANTS = ("tuned", "lit_gpu_eager")
GROUPS = ("Lightning", "lit_gpu", "torchmetrics", "torch (Python)", "torch (C calls)", "benchmark", "other")
GLUE = ("Lightning", "lit_gpu", "torchmetrics")

#: a part of a source path -> its group
PLACES = (
    ("/lightning/", "Lightning"),
    ("/lightning_utilities/", "Lightning"),
    ("/lit_gpu/", "lit_gpu"),
    ("/torchmetrics/", "torchmetrics"),
    ("/torch/", "torch (Python)"),
    ("/benchmarks/", "benchmark"),
)

Key = tuple[str, int, str]


def group(key: Key) -> str:
    """Where a profiled function lives (one of :data:`GROUPS`)."""
    path, _, func = key
    if path == "~":  # a C function: cProfile names it "<built-in method ...>" / "<method ... of ... objects>"
        return "torch (C calls)" if "torch" in func or "Tensor" in func else "other"
    return next((name for part, name in PLACES if part in path), "other")


def where(key: Key) -> str:
    path, line, func = key
    if path == "~":
        return func
    parts = Path(path).parts
    tail = parts[parts.index("lightning") :] if "lightning" in parts else parts[-2:]
    return f"{'/'.join(tail)}:{line} {func}"


def profile(name: str, data, args: argparse.Namespace) -> pstats.Stats:
    """One run of contestant ``name`` with cProfile on over its timed steps."""
    prof = cProfile.Profile(time.thread_time if args.timer == "thread" else time.perf_counter)
    result = run_contestant(name, data, args, profile=prof)
    print(
        f"# {name}: {result['images_s']:.2f} images/s under the profiler, "
        f"{result['cpu_ms']:.2f} ms CPU a step"
    )
    return pstats.Stats(prof)


def by_group(stats: pstats.Stats) -> dict[str, float]:
    totals = dict.fromkeys(GROUPS, 0.0)
    for key, (_, _, own, _, _) in stats.stats.items():
        totals[group(key)] += own
    return totals


def c_calls(stats: pstats.Stats) -> tuple[dict[str, float], dict[tuple[str, str], list[float]]]:
    """C calls' own time by the group of the Python function that made each call; and, for calls made from
    :data:`GLUE` code, by (caller, C function): [calls, seconds]. A kernel launch is such a C call."""
    totals, pairs = dict.fromkeys(GROUPS, 0.0), {}
    for key, (_, _, _, _, callers) in stats.stats.items():
        if key[0] != "~":
            continue
        for caller, (_, calls, own, _) in callers.items():
            totals[group(caller)] += own
            if group(caller) in GLUE:
                pair = pairs.setdefault((where(caller), key[2]), [0, 0.0])
                pair[0], pair[1] = pair[0] + calls, pair[1] + own
    return totals, pairs


def _difference_table(title: str, tuned: dict[str, float], lit: dict[str, float], per: float) -> None:
    print(f"\n| {title}, ms / step | tuned | lit_gpu_eager | difference |")
    print("|---|---:|---:|---:|")
    for g in GROUPS:
        if tuned[g] or lit[g]:
            print(f"| {g} | {tuned[g] * per:.3f} | {lit[g] * per:.3f} | {(lit[g] - tuned[g]) * per:+.3f} |")
    t, l_ = sum(tuned.values()), sum(lit.values())
    print(f"| **all** | {t * per:.3f} | {l_ * per:.3f} | {(l_ - t) * per:+.3f} |")


def report(stats: dict[str, pstats.Stats], steps: int, top: int) -> None:
    per = 1e3 / steps
    own = {name: by_group(s) for name, s in stats.items()}
    _difference_table("own time by where the code lives", own["tuned"], own["lit_gpu_eager"], per)
    made = {name: c_calls(s) for name, s in stats.items()}
    _difference_table(
        "C calls (kernel launches, autograd, copies) by the code that made them",
        made["tuned"][0],
        made["lit_gpu_eager"][0],
        per,
    )
    print(f"\nlit_gpu_eager: C calls made by {', '.join(GLUE)} code, per step")
    print("| caller | C function | calls / step | ms / step |")
    print("|---|---|---:|---:|")
    for (caller, func), (calls, secs) in sorted(made["lit_gpu_eager"][1].items(), key=lambda kv: -kv[1][1])[
        :top
    ]:
        print(f"| {caller} | {func} | {calls / steps:.1f} | {secs * per:.3f} |")
    glue = {k: v for k, v in stats["lit_gpu_eager"].stats.items() if group(k) in GLUE}
    for title, index in (("own time", 2), ("time under it (cumulative)", 3)):
        print(f"\nlit_gpu_eager: {', '.join(GLUE)} functions by {title}, per step")
        print("| function | calls / step | own ms / step | cumulative ms / step |")
        print("|---|---:|---:|---:|")
        for key, (_, calls, own, cum, _) in sorted(glue.items(), key=lambda kv: -kv[1][index])[:top]:
            print(f"| {where(key)} | {calls / steps:.1f} | {own * per:.3f} | {cum * per:.3f} |")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu"
    )
    p.add_argument("--steps", type=int, default=100, help="profiled steps per contestant")
    p.add_argument("--warmup", type=int, default=20, help="unprofiled steps first")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--top", type=int, default=15, help="rows of the function tables")
    p.add_argument(
        "--timer",
        choices=["thread", "wall"],
        default="thread",
        help="the profiler's clock: the main thread's CPU time (load-proof: another process's turn on the "
        "core is not billed to the function it interrupted) or wall time (waits for the GPU included)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.net, args.image_size, args.lit_args = "resnet18", 32, []
    print(f"# {machine()}")
    print(
        f"# ResNet-18, 32x32, batch {args.batch_size}, {args.workers} workers, "
        f"{args.warmup} + {args.steps} steps"
    )
    data = make_data(args, (args.warmup + args.steps) * args.batch_size)
    stats = {name: profile(name, data, args) for name in CONTESTANTS}
    report(stats, args.steps, args.top)


if __name__ == "__main__":
    main()
