"""Building ``LitGpuCLI`` for ``fit ... --print_config``: one subcommand parser, or all four (Lightning).

    python benchmarks/cli_construct.py [--repeats 10]

In one warm process (imports done), interleaved: ``one`` is ``LitGpuCLI`` as shipped (only the parser of the
subcommand the command line starts with); ``all four`` is the same class with Lightning's own
``_add_subcommands`` (parsers for fit, validate, test and predict). Medians with their spread and the load
average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI

from lit_gpu.cli import LitGpuCLI

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ARGS = [
    "fit",
    "--config",
    str(CONFIGS / "simple.yaml"),
    "--config",
    str(CONFIGS / "debug.yaml"),
    "--print_config",
]


class AllFour(LitGpuCLI):
    """LitGpuCLI building every subcommand's parser, as LightningCLI does."""

    def _add_subcommands(self, parser: Any, **kwargs: Any) -> None:
        LightningCLI._add_subcommands(self, parser, **kwargs)


def construct(cls: type[LitGpuCLI]) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        cls(args=ARGS)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    construct(LitGpuCLI), construct(AllFour)  # warm-up
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {"one parser (lit_gpu)": [], "all four (Lightning)": []}
    for i in range(args.repeats):
        order = [(LitGpuCLI, "one parser (lit_gpu)"), (AllFour, "all four (Lightning)")]
        for cls, name in order if i % 2 == 0 else order[::-1]:
            times[name].append(construct(cls))
    print(f"load average (1 min): before {load_before:.2f}, after {os.getloadavg()[0]:.2f}")
    print("\n| construction | s, median (min-max) |\n|---|---:|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f}) |")


if __name__ == "__main__":
    main()
