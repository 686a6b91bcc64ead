"""What loading a checkpoint costs, bounded (lit_gpu) and bare (torch.load weights-only), per file kind.

    PYTHONPATH=$PWD python benchmarks/load_bounds.py [--export]

Generates a normal checkpoint, one of 60 000 tiny tensors, and every bomb of
``tests/helpers/checkpoint_bombs.py`` in a temp folder; loads each in a fresh process twice: with
``lit_gpu.checkpoints.read_checkpoint`` and with a bare ``torch.load(weights_only=True)`` (capped at
its address space + 4 GiB so a bomb cannot take the machine). Prints the file size, the budget
(``CheckpointLimits().budget(size)``), peak RSS over the RSS just before the load (VmHWM reset through
``/proc/self/clear_refs``), seconds, and the outcome.
``--export`` also times ``lit-gpu export`` of checkpoints with 8 000 and 60 000 state-dict keys.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAP = 4 * 2**30


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def _one(path: str, mode: str) -> None:
    """In the child: load ``path`` once and print ``{peak_mib, seconds, outcome}`` as JSON."""
    import torch

    from lit_gpu.checkpoints import read_checkpoint

    vm = _status("VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (vm + CAP, vm + CAP))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS: the imports' peak does not hide the load's
    base = _status("VmRSS")
    start = time.perf_counter()
    try:
        if mode == "lit_gpu":
            read_checkpoint(path)
        else:
            torch.load(path, weights_only=True, map_location="cpu")
        outcome = "loaded"
    except MemoryError:
        outcome = "MemoryError at the cap"
    except Exception as err:  # noqa: BLE001 - the outcome is the measurement
        text = str(err)
        text = " ".join(text.split())  # one line, whatever the message holds
        outcome = "MemoryError at the cap" if "alloc" in text else f"{type(err).__name__}: {text[:70]}"
    seconds = time.perf_counter() - start
    peak = (_status("VmHWM") - base) / 2**20
    print(json.dumps({"peak_mib": peak, "seconds": seconds, "outcome": outcome}))


def _run(path: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, __file__, "--one", str(path), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return (
        json.loads(lines[-1])
        if lines
        else {"peak_mib": float("nan"), "seconds": 0, "outcome": out.stderr[-80:]}
    )


def _export_times(folder: Path) -> None:
    import torch

    from lit_gpu.commands.export import export_checkpoint
    from lit_gpu.errors import LitGpuError

    for keys in (8_000, 60_000):
        shared = torch.zeros(1)
        state = {f"block{i}.module.w": shared for i in range(keys)}
        spec = {"class_path": "lit_gpu.nets.SimpleModel", "init_args": {"in_features": 2, "out_features": 2}}
        path = folder / f"keys{keys}.ckpt"
        torch.save({"state_dict": state, "lit_gpu_net": spec, "pytorch-lightning_version": "2.6.6"}, path)
        start = time.perf_counter()
        try:
            export_checkpoint(path, folder / "out.pt")
            outcome = "exported"
        except LitGpuError as err:
            outcome = f"refused: {str(err)[:60]}"
        print(f"export, {keys:>6} keys: {time.perf_counter() - start:6.1f} s  ({outcome})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", nargs=2, metavar=("PATH", "MODE"))
    parser.add_argument("--export", action="store_true")
    parser.add_argument("--only", nargs="*", help="only the files whose name starts with one of these")
    parser.add_argument("--no_bare", nargs="*", default=[], help="skip the bare torch.load of these")
    args = parser.parse_args()
    if args.one:
        _one(*args.one)
        return
    from lit_gpu.checkpoints.read import CheckpointLimits
    from tests.helpers import checkpoint_bombs as bombs

    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = {"normal (16 x 4 MiB tensors)": bombs.normal_checkpoint(folder, tensors=16, numel=2**20)}
        import torch

        tiny = folder / "tiny.ckpt"
        torch.save({"state_dict": {f"l{i}.w": torch.zeros(1) for i in range(60_000)}}, tiny)
        files["60 000 tiny tensors"] = tiny
        files.update({name: make for name, make in bombs.BOMBS.items()})
        if args.only is not None:
            files = {k: v for k, v in files.items() if any(k.startswith(o) for o in args.only)}
        print(
            f"{'file':34} {'size':>9} {'budget':>8} | {'lit_gpu MiB':>11} {'s':>6} outcome | "
            f"{'torch MiB':>9} {'s':>6} outcome"
        )
        for name, path in files.items():
            path = path if isinstance(path, Path) else path(folder)
            size = path.stat().st_size
            skip = any(name.startswith(o) for o in args.no_bare)
            ours = _run(path, "lit_gpu")
            bare = (
                {"peak_mib": float("nan"), "seconds": float("nan"), "outcome": "not run"}
                if skip
                else _run(path, "torch")
            )
            budget = CheckpointLimits().budget(size) / 2**20
            print(
                f"{name:34} {size / 2**20:8.2f}M {budget:7.0f}M | {ours['peak_mib']:11.1f} "
                f"{ours['seconds']:6.2f} {ours['outcome'][:28]:28} | {bare['peak_mib']:9.1f} "
                f"{bare['seconds']:6.2f} {bare['outcome'][:40]}"
            )
        if args.export:
            _export_times(folder)
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
