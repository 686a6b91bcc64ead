"""The warm-up a recipe pays in each new process: a first and a second process, one after the other.

    python benchmarks/warmup.py --config configs/mnist_gpu_graph.yaml configs/mnist_gpu.yaml --data-dir DATA

Each config is fitted in ``--processes`` fresh Python processes in a row on this machine (the second
finds whatever the first left: torch's compile caches under ``TORCHINDUCTOR_CACHE_DIR``, by default
``/tmp/torchinductor_$USER``). Per process: **warm-up**, the time from ``on_train_start`` to the end of
the first ``--steps`` training steps (GPU synchronized), less what those steps take at the fit's steady
pace; the whole training loop; and how long building the CLI objects took (imports not counted).
Issue 42's goal: the second process of a recipe starts training within 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(config: str, data_dir: str, device: str, steps: int, extra: list[str]) -> None:
    import lightning.pytorch as pl
    import torch
    from _recipe import in_tempdir, sync

    from lit_gpu.cli import LitGpuCLI

    marks: dict[str, float] = {}

    class Clock(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            sync(device)
            marks["start"] = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == steps:
                sync(device)
                marks["first"] = time.perf_counter()

        def on_train_end(self, trainer, pl_module):
            sync(device)
            marks["end"], marks["steps"] = time.perf_counter(), trainer.global_step

    args = ["--config", config, "--data.data_dir", data_dir, "--data.download", "false"]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    if device == "cuda":
        args += ["--trainer.accelerator", "gpu", "--data.storage", "gpu"]
    else:
        args += ["--trainer.accelerator", "cpu"]
    args += extra
    with in_tempdir():
        t0 = time.perf_counter()
        cli = LitGpuCLI(args=args, run=False)
        built = time.perf_counter() - t0
        cli.trainer.callbacks.append(Clock())
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    first = marks["first"] - marks["start"]
    rest = (marks["end"] - marks["first"]) / max(1, marks["steps"] - steps)  # steady seconds a step
    print(
        json.dumps(
            {
                "build_s": built,
                "first_steps_s": first,
                "warmup_s": first - steps * rest,
                "train_s": marks["end"] - marks["start"],
                "torch": torch.__version__,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", nargs="+", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="the first steps, where the warm-up happens")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("extra", nargs="*", help="more lit-gpu flags after --, for every process")
    args = parser.parse_args()
    if args.child:
        child(args.config[0], args.data_dir, args.device, args.steps, args.extra)
        return
    print(f"# {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; each process fits the whole recipe")
    print("| config | process | warm-up s | first steps s | training s | CLI build s |")
    print("|---|---:|---:|---:|---:|---:|")
    for config in args.config:
        for i in range(args.processes):
            cmd = [sys.executable, __file__, "--child", "--config", str(Path(config).resolve())]
            cmd += ["--data-dir", str(Path(args.data_dir).resolve()), "--device", args.device]
            cmd += ["--steps", str(args.steps), "--", *args.extra]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                print(f"| {Path(config).name} | {i + 1} | failed: {done.stderr.strip().splitlines()[-1:]} |")
                continue
            r = json.loads(lines[-1])
            print(
                f"| {Path(config).name} | {i + 1} | {r['warmup_s']:.2f} | {r['first_steps_s']:.2f} | "
                f"{r['train_s']:.2f} | {r['build_s']:.2f} |",
                flush=True,
            )
    print(f"\nload {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
