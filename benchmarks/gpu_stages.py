"""Issue 52's stages in one process (``import lightning`` once: ~18 s a process on the lent GPU machines).

    python benchmarks/gpu_stages.py --out "$OUT"                  # on a GPU: every stage, ~4-7 minutes
    python benchmarks/gpu_stages.py --out /tmp/s --tiny           # on a CPU, tiny sizes (the tests' run)
    python benchmarks/gpu_stages.py --out "$OUT" --stages glue resnet50

Stages, in this order (cheapest first: a stage that runs long leaves the earlier ones' files):

* ``glue`` (``glue_profile.py``): where lit_gpu's eager ResNet-18 step spends host time beyond the tuned
  loop's (cProfile over the timed steps);
* ``resnet50`` (``resnet50_gpu.py``): the GPU-bound workload: ResNet-50 at 224 px, lit_gpu's recipe vs
  the hand-written loop, the achieved fraction of the card's dense bf16 peak, the loader's own limit;
* ``resnet18`` (``resnet_gpu.py``): ResNet-18 at 32 px, every contestant interleaved: tuned eager,
  hand-written whole-step graph, lit_gpu (capture), lit_gpu eager, ``torch.compile(mode="max-autotune")``
  (last in each round: its first compile is the one wait whose length is not known in advance).

Each stage's printout goes to ``OUT/STAGE.txt`` as it runs (a stage that fails leaves its traceback
there, and the next stage runs); ``--budget-s`` skips the stages that would start after it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
import glue_profile  # noqa: E402
import resnet50_gpu  # noqa: E402
import resnet_gpu  # noqa: E402

STAGES: dict[str, Callable[[list[str]], None]] = {
    "glue": glue_profile.main,
    "resnet50": resnet50_gpu.main,
    "resnet18": resnet_gpu.main,
}
#: each stage's arguments on a GPU: sized for a few minutes in all
ON_GPU = {
    "glue": ["--steps", "100", "--warmup", "20"],
    # issue 59: one interleaved run per figure, rounds enough for a median (a step here varies by 10-30 %
    # from round to round on a shared host); torch.compile (211 s to its first step) on request only
    "resnet50": ["--steps", "30", "--warmup", "8", "--repeats", "3", "--loader-batches", "24"],
    "resnet18": ["--steps", "300", "--warmup", "30", "--repeats", "4", "--num-samples", "90000",
                 "--only", "tuned", "hand_graph", "lit_gpu", "lit_gpu_eager"],
}  # fmt: skip
_CPU = ["--device", "cpu", "--workers", "1"]
#: the same stages on a CPU at tiny sizes (the capture and compile contestants skipped with their reasons)
TINY = {
    "glue": [*_CPU, "--batch-size", "2", "--steps", "2", "--warmup", "1", "--top", "5"],
    "resnet50": [*_CPU, "--image-size", "32", "--batch-size", "2", "--steps", "1", "--warmup", "1",
                 "--repeats", "1", "--loader-batches", "1", "--only", "tuned", "lit_gpu", "lit_gpu_eager"],
    "resnet18": [*_CPU, "--batch-size", "2", "--steps", "1", "--warmup", "1", "--repeats", "1",
                 "--num-samples", "16"],
}  # fmt: skip


class Tee:
    """Writes to the terminal and to a file, flushed at each write (a killed run keeps what it printed)."""

    def __init__(self, *streams: TextIO) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
            s.flush()
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for STAGE.txt")
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    p.add_argument("--tiny", action="store_true", help="CPU, tiny sizes: that everything runs, no figures")
    p.add_argument("--budget-s", type=float, default=420.0, help="start no stage after this many seconds")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sizes = TINY if args.tiny else ON_GPU
    start, failed = time.monotonic(), []
    for name in [s for s in STAGES if s in args.stages]:
        elapsed = time.monotonic() - start
        with open(args.out / f"{name}.txt", "w") as f, contextlib.redirect_stdout(Tee(sys.__stdout__, f)):
            if elapsed > args.budget_s:
                print(f"== {name}: not started, {elapsed:.0f} s of the {args.budget_s:.0f} s budget gone")
                continue
            print(f"== {name}: {' '.join(sizes[name])}")
            t0 = time.monotonic()
            try:
                STAGES[name](sizes[name])
            except (Exception, SystemExit):  # a failed stage (a parser's exit included) leaves the others
                traceback.print_exc(file=sys.stdout)
                failed.append(name)
            print(f"== {name}: {time.monotonic() - t0:.0f} s")
    print(f"== all stages: {time.monotonic() - start:.0f} s; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
