"""Start-up of ``lit-gpu fit --help`` and ``lit-gpu env`` against importing Lightning: what lit_gpu adds.

    python benchmarks/startup.py [--repeats 7] [--max-load 1.5]

Each variant is a fresh ``python`` process (wall time from spawn to exit), run interleaved in a
rotated order, medians with their spread (min-max):

* ``import Lightning``: ``python -c "import lightning.pytorch.cli"`` (Lightning, torch, torchmetrics,
  jsonargparse: the floor any ``lit-gpu`` command that builds a Trainer pays);
* ``LightningCLI fit --help``: Lightning's own CLI with no lit_gpu at all;
* ``lit-gpu fit --help`` and ``lit-gpu env``.

Then ``python -X importtime`` measures lit_gpu's own import time on top of an already imported
Lightning (``import lightning.pytorch.cli`` first, then ``lit_gpu.cli.main``): the part of the start
that is lit_gpu's (issue 22 target: < 0.2 s). Differences of whole-process times are reported
only when the load average stayed at or below ``--max-load``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LOAD = 1.5
PY = sys.executable

VARIANTS: dict[str, list[str]] = {
    "import Lightning": [PY, "-c", "import lightning.pytorch.cli"],
    "LightningCLI fit --help": [
        PY, "-c", "from lightning.pytorch.cli import LightningCLI; LightningCLI(args=['fit', '--help'])",
    ],
    "lit-gpu fit --help": [PY, "-m", "lit_gpu", "fit", "--help"],
    "lit-gpu env": [PY, "-m", "lit_gpu", "env"],
}  # fmt: skip


#: set by main(): keep Python's bytecode cache (as an installed package has it) unless --no-bytecode
BYTECODE = True


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if BYTECODE:  # this project's shells set PYTHONDONTWRITEBYTECODE: every import would compile the source
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), check=False)
    return time.perf_counter() - t0


def lit_gpu_import_seconds() -> tuple[float, list[tuple[str, float]]]:
    """lit_gpu's import time after Lightning is imported, and its 8 costliest modules (self time)."""
    code = "import lightning.pytorch.cli; import lit_gpu.cli.main"
    cmd = [PY, "-X", "importtime", "-c", code]
    subprocess.run(cmd, capture_output=True, env=_env(), check=False)  # writes the bytecode cache
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=False).stderr
    total, own, after_lightning = 0.0, [], False
    for line in out.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if not m:
            continue
        self_us, cumulative_us, indent, name = int(m[1]), int(m[2]), len(m[3]), m[4]
        if name == "lightning.pytorch.cli" and indent == 1:  # a line is printed when its import ends
            after_lightning = True
            continue
        if not after_lightning:
            continue
        if name == "lit_gpu.cli.main":
            total = max(total, cumulative_us / 1e6)
        own.append((name, self_us / 1e6))
    return total, sorted(own, key=lambda kv: -kv[1])[:8]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-load", type=float, default=MAX_LOAD)
    parser.add_argument(
        "--no-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE: imports compile sources"
    )
    args = parser.parse_args()
    global BYTECODE
    BYTECODE = not args.no_bytecode
    names = list(VARIANTS)
    for name in names:  # warm the file cache (first imports read .pyc files from disk)
        timed(VARIANTS[name])
    load_before = os.getloadavg()[0]
    runs: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(timed(VARIANTS[name]))
    load_after = os.getloadavg()[0]
    noisy = max(load_before, load_after) > args.max_load
    cache = "bytecode cache on" if BYTECODE else "no bytecode cache (sources compiled at each import)"
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.repeats} repeats, {cache}")
    print(f"load average (1 min): before {load_before:.2f}, after {load_after:.2f}")
    print("\n| process | wall s, median (min-max) |")
    print("|---|---:|")
    for name, values in runs.items():
        print(f"| {name} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) |")
    med = {name: statistics.median(v) for name, v in runs.items()}
    note = f"noise: load {max(load_before, load_after):.2f}" if noisy else None
    fit_delta = note or f"{med[names[2]] - med[names[1]]:+.2f} s"
    env_delta = note or f"{med[names[3]] - med[names[0]]:+.2f} s"
    print(f"\nlit-gpu fit --help - LightningCLI fit --help: {fit_delta}")
    print(f"lit-gpu env - import Lightning: {env_delta}")
    total, top = lit_gpu_import_seconds()
    print(f"\nlit_gpu's own import time on top of Lightning (-X importtime): {total:.3f} s (target < 0.2 s)")
    costly = ", ".join(f"{n} {s * 1e3:.0f} ms" for n, s in top)
    print(f"costliest modules imported after Lightning (self time): {costly}")


if __name__ == "__main__":
    main()
