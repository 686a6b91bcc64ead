"""Host time NaNGuard's GPU check adds to a step: the verdict ring against the check it replaced.

    python benchmarks/nan_guard_gpu.py [--steps 2000] [--repeats 7]

Each step runs a small matmul (the "loss") and then one check of it, as ``NaNGuard`` does before
``backward``: ``before`` is the round-8 check (``isnan``/``isinf`` + ``any`` + ``stack``, a fresh
pinned flag and a CUDA event every step), ``ring`` is ``lit_gpu.callbacks.nan_guard._Verdicts``
(one ``isfinite`` and one copy into a reused pinned byte), ``none`` runs the step alone. Variants
run interleaved in a rotated order; the figure is the median host time per step over the repeats
(min-max) and each check's cost is its time minus ``none``'s. The load average is printed before
and after. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import deque

import torch

from lit_gpu.callbacks.nan_guard import _Verdicts


class _Before:
    """The check NaNGuard made per GPU step before the ring (kept here as the reference)."""

    def __init__(self, loss: torch.Tensor) -> None:
        bad = torch.stack([torch.isnan(loss).any(), torch.isinf(loss).any()])
        self.flag = torch.empty(2, dtype=torch.bool, pin_memory=True)
        self.flag.copy_(bad, non_blocking=True)
        self.event = torch.cuda.Event()
        self.event.record()


def run(variant: str, steps: int, a: torch.Tensor) -> float:
    pending: deque[_Before] = deque()
    ring = _Verdicts(a.device)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for step in range(steps):
        loss = (a @ a).mean()
        if variant == "before":
            while pending and pending[0].event.query():
                pending[0].flag.tolist()
                pending.popleft()
            pending.append(_Before(loss))
        elif variant == "ring":
            while ring.arrived() or ring.full():
                ring.pop()
            ring.push(loss, (step, 0, step))
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("nan_guard_gpu.py: needs a CUDA GPU and torch sees none")
    a = torch.randn(256, 256, device="cuda")
    names = ["none", "before", "ring"]
    for name in names:  # warm-up: kernels, pinned pool, allocator
        run(name, 200, a)
    print(
        f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, load before {os.getloadavg()[0]:.2f}"
    )
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names[r % 3 :] + names[: r % 3]:
            times[name].append(run(name, args.steps, a))
    base = statistics.median(times["none"])
    print("| variant | host time / step (us) | check's cost (us) |")
    print("|---|---|---|")
    for name in names:
        med = statistics.median(times[name])
        print(
            f"| {name} | {med * 1e6:.1f} ({min(times[name]) * 1e6:.1f}-{max(times[name]) * 1e6:.1f}) "
            f"| {(med - base) * 1e6:+.1f} |"
        )
    print(f"# load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
