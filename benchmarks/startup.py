"""Start-up of every ``lit-gpu`` command against ``import torch`` and ``import lightning.pytorch``.

    python benchmarks/startup.py [--repeats 7] [--max-load 1.5] [--no-bytecode]

Each variant is a fresh ``python`` process (wall time from spawn to exit), all run interleaved in a
rotated order, ``--repeats`` times; medians with their spread (min-max):

* the floors: ``python -c "import torch"`` and ``python -c "import lightning.pytorch"``;
* the commands that train nothing: ``lit-gpu --help``, ``--version``, ``configs``, ``configs NAME``,
  ``init DIR`` (a new folder each run); each should take <= 0.25x of ``import lightning.pytorch`` (they
  import neither torch nor Lightning);
* ``lit-gpu env --json``: torch and NVML, not Lightning; should take <= ``import torch`` + 0.3 s;
* the training path: ``lit-gpu fit --help`` against Lightning's own ``LightningCLI fit --help``.

The ratios and differences are printed only when the 1-minute load average stayed at or below
``--max-load`` before and after (``/proc/loadavg`` is printed either way). Then ``python -X importtime``
measures lit_gpu's own import time on top of an already imported Lightning (``import
lightning.pytorch.cli`` first, then ``lit_gpu.cli.lightning_cli``): the part of a training command's
start that is lit_gpu's (target < 0.2 s).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LOAD = 1.5
PY = sys.executable
LIT_GPU = [PY, "-m", "lit_gpu"]
FRONT_DOOR_RATIO = 0.25  # of `import lightning.pytorch`
ENV_EXTRA_S = 0.3  # over `import torch`

_INIT_RUNS = itertools.count()
_SCRATCH = Path(tempfile.mkdtemp(prefix="lit_gpu_startup_"))


def _init_command() -> list[str]:
    return [*LIT_GPU, "init", str(_SCRATCH / f"project_{next(_INIT_RUNS)}")]


FLOORS: dict[str, Callable[[], list[str]]] = {
    "import torch": lambda: [PY, "-c", "import torch"],
    "import lightning.pytorch": lambda: [PY, "-c", "import lightning.pytorch"],
}
FRONT_DOOR: dict[str, Callable[[], list[str]]] = {
    "lit-gpu --help": lambda: [*LIT_GPU, "--help"],
    "lit-gpu --version": lambda: [*LIT_GPU, "--version"],
    "lit-gpu configs": lambda: [*LIT_GPU, "configs"],
    "lit-gpu configs mnist": lambda: [*LIT_GPU, "configs", "mnist"],
    "lit-gpu init DIR": _init_command,
}
OTHERS: dict[str, Callable[[], list[str]]] = {
    "lit-gpu env --json": lambda: [*LIT_GPU, "env", "--json"],
    "LightningCLI fit --help": lambda: [
        PY, "-c", "from lightning.pytorch.cli import LightningCLI; LightningCLI(args=['fit', '--help'])",
    ],
    "lit-gpu fit --help": lambda: [*LIT_GPU, "fit", "--help"],
}  # fmt: skip
VARIANTS = {**FLOORS, **FRONT_DOOR, **OTHERS}

#: set by main(): keep Python's bytecode cache (as an installed package has it) unless --no-bytecode
BYTECODE = True


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if BYTECODE:  # this project's shells set PYTHONDONTWRITEBYTECODE: every import would compile the source
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def loadavg() -> str:
    """The first three fields of ``/proc/loadavg`` (1, 5 and 15 minutes)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def lit_gpu_import_seconds() -> tuple[float, list[tuple[str, float]]]:
    """lit_gpu's import time after Lightning is imported, and its 8 costliest modules (self time)."""
    code = "import lightning.pytorch.cli; import lit_gpu.cli.lightning_cli"
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
        if indent == 1:  # a top-level import of the second statement: lit_gpu and what it pulls in
            total += cumulative_us / 1e6
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
    try:
        for name in names:  # warm the file cache and the bytecode cache
            timed(VARIANTS[name]())
        load_before = loadavg()
        runs: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                runs[name].append(timed(VARIANTS[name]()))
        load_after = loadavg()
    finally:
        shutil.rmtree(_SCRATCH, ignore_errors=True)
    peak = max(float(load_before.split()[0]), float(load_after.split()[0]))
    noisy = peak > args.max_load
    cache = "bytecode cache on" if BYTECODE else "no bytecode cache (sources compiled at each import)"
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.repeats} repeats, {cache}")
    print(f"/proc/loadavg: before {load_before}, after {load_after}")
    med = {name: statistics.median(v) for name, v in runs.items()}
    lightning, torch = med["import lightning.pytorch"], med["import torch"]
    print("\n| process | wall s, median (min-max) | vs import lightning.pytorch |")
    print("|---|---:|---:|")
    for name, values in runs.items():
        ratio = "-" if noisy else f"{med[name] / lightning:.2f}x"
        print(f"| {name} | {med[name]:.2f} ({min(values):.2f}-{max(values):.2f}) | {ratio} |")
    print()
    if noisy:
        print(f"ratios not shown: load {peak:.2f} > {args.max_load} (rerun on a quieter machine)")
    else:
        for name in FRONT_DOOR:
            ratio = med[name] / lightning
            ok = "met" if ratio <= FRONT_DOOR_RATIO else "NOT met"
            print(f"{name}: {ratio:.3f}x import lightning.pytorch (<= {FRONT_DOOR_RATIO}x: {ok})")
        extra = med["lit-gpu env --json"] - torch
        ok = "met" if extra <= ENV_EXTRA_S else "NOT met"
        print(f"lit-gpu env --json - import torch: {extra:+.2f} s (<= +{ENV_EXTRA_S} s: {ok})")
        fit = med["lit-gpu fit --help"] - med["LightningCLI fit --help"]
        print(f"lit-gpu fit --help - LightningCLI fit --help: {fit:+.2f} s")
    total, top = lit_gpu_import_seconds()
    print(f"\nlit_gpu's own import time on top of Lightning (-X importtime): {total:.3f} s (target < 0.2 s)")
    costly = ", ".join(f"{n} {s * 1e3:.0f} ms" for n, s in top)
    print(f"costliest modules imported after Lightning (self time): {costly}")


if __name__ == "__main__":
    main()
