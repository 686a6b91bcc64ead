"""``lit-gpu bench``: the same job for N steps under several device/precision/strategy modes.

    lit-gpu bench --config configs/mnist_fast.yaml --modes cpu,gpu,amp,bf16,dp,ddp --steps 100

Each mode runs in a fresh subprocess (clean peak memory, global settings and compile caches; a
crash in one mode does not end the table), which builds model and data from the configs through
:class:`~lit_gpu.cli.LitGpuCLI` and fits ``--steps`` steps with no validation, logger or
checkpoints. Throughput comes from Fabric's public ``Throughput`` (the rates Lightning's
``ThroughputMonitor`` logs, over the steps after ``--warmup``).
Modes that cannot run here are skipped with the reason.

The subprocesses never put the working folder on ``sys.path`` (:func:`child_python`): a ``torch.py``
or ``yaml.py`` lying where ``lit-gpu bench`` runs is data, not code the benchmark imports.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import override

from lit_gpu import messages
from lit_gpu.devices import on_cuda
from lit_gpu.textfiles import read_json

MODES = ("cpu", "gpu", "amp", "bf16", "dp", "ddp")


@dataclass
class ModePlan:
    """How one mode runs (trainer settings), or why it cannot run here."""

    mode: str
    accelerator: str = "cpu"
    devices: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    skip: str | None = None

    @property
    def label(self) -> str:
        return f"{self.accelerator}x{self.devices} {self.strategy} {self.precision}"


@dataclass
class BenchResult:
    """One table row."""

    mode: str
    setup: str = ""
    samples_per_sec: float | None = None
    sec_per_epoch: float | None = None
    peak_mem_mib: float | None = None
    mem_kind: str = ""
    warmup_s: float | None = None
    speedup: float | None = None
    status: str = "ok"
    extra: dict[str, Any] = field(default_factory=dict)


def plan_mode(mode: str) -> ModePlan:
    """Trainer settings of ``mode`` on this machine, with ``skip`` set when it cannot run."""
    import torch

    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    no_cuda = "no CUDA device (torch.cuda.is_available() is False)"
    if mode == "cpu":
        return ModePlan(mode)
    if mode == "gpu":
        return ModePlan(mode, "gpu", 1, skip=None if n_gpu else no_cuda)
    if mode == "amp":
        return ModePlan(mode, "gpu", 1, precision="16-mixed", skip=None if n_gpu else no_cuda)
    if mode == "bf16":
        if n_gpu:
            ok = torch.cuda.is_bf16_supported()
            return ModePlan(mode, "gpu", 1, precision="bf16-mixed", skip=None if ok else "GPU lacks bf16")
        return ModePlan(mode, "cpu", 1, precision="bf16-mixed")
    if mode == "dp":
        from lightning.pytorch.strategies import StrategyRegistry

        import lit_gpu  # noqa: F401  (registers the "dp" strategy when available)

        if "dp" not in StrategyRegistry:
            return ModePlan(mode, skip="strategy 'dp' is not registered in this lit_gpu")
        if n_gpu < 2:
            why = no_cuda if not n_gpu else "DataParallel needs >= 2 CUDA devices (found 1)"
            return ModePlan(mode, "gpu", max(n_gpu, 1), "dp", skip=why)
        return ModePlan(mode, "gpu", n_gpu, "dp")
    if mode == "ddp":
        if n_gpu >= 2:
            return ModePlan(mode, "gpu", n_gpu, "ddp")
        if n_gpu == 1:
            return ModePlan(mode, "gpu", 1, "ddp", skip="DDP needs >= 2 CUDA devices (found 1)")
        return ModePlan(mode, "cpu", 2, "ddp")  # no GPU: 2 CPU processes over gloo
    raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


# ---- worker: one mode, in its own process ------------------------------------------------
def _batch_size(batch: Any) -> int:
    first = batch[0] if isinstance(batch, list | tuple) else batch
    return len(first)


def _make_monitor(result_path: str, warmup: int, steps: int):
    """A callback that measures training throughput with Fabric's public ``Throughput`` (the rates
    Lightning's ``ThroughputMonitor`` logs, kept without a logger) and writes them at the end."""
    import lightning.pytorch as pl
    import torch
    from lightning.fabric.utilities.throughput import Throughput

    class _BenchMonitor(pl.Callback):
        def __init__(self) -> None:
            # rates over the last `steps - warmup` batches = steady state after warm-up
            self.window = max(2, steps - warmup)
            self.throughput: Throughput | None = None
            self.metrics: dict[str, float] = {}
            self.epoch_batches = self.samples = self.batches = 0
            self.t_start = self.warmup_s = 0.0

        @override
        def on_train_start(self, trainer, pl_module) -> None:
            self.throughput = Throughput(world_size=trainer.world_size, window_size=self.window)
            self.t_start = time.perf_counter()
            self.epoch_batches = int(trainer.num_training_batches)
            if on_cuda(trainer):
                torch.cuda.reset_peak_memory_stats(trainer.strategy.root_device)

        @override
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if on_cuda(trainer):
                torch.cuda.synchronize()  # else perf_counter() does not include the step's kernels
            assert self.throughput is not None
            self.samples += _batch_size(batch)
            self.batches += 1
            elapsed = time.perf_counter() - self.t_start
            self.throughput.update(time=elapsed, batches=self.batches, samples=self.samples)
            if self.batches >= 2:  # Throughput needs two points for a rate
                self.metrics = {k: float(v) for k, v in self.throughput.compute().items()}
            if trainer.global_step == warmup:  # warm-up time: first steps, torch.compile included
                self.warmup_s = elapsed

        @override
        def on_train_end(self, trainer, pl_module) -> None:
            if trainer.global_rank != 0:
                return
            device = trainer.strategy.root_device
            if device.type == "cuda":
                peak, kind = torch.cuda.max_memory_allocated(device) / 2**20, "CUDA alloc"
            else:
                peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "RSS"
            out = {
                "metrics": self.metrics,
                "world_size": trainer.world_size,
                "batch_size": self.samples / max(1, self.batches),
                "epoch_batches": self.epoch_batches,
                "steps": int(trainer.global_step),
                "warmup_s": self.warmup_s,
                "peak_mem_mib": peak,
                "mem_kind": kind,
            }
            Path(result_path).write_text(json.dumps(out))

    return _BenchMonitor()


def run_worker(argv: list[str]) -> int:
    """Fit one mode for ``--steps`` steps and write its throughput to ``--result`` (JSON)."""
    parser = argparse.ArgumentParser(prog="lit-gpu bench --worker")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--mode", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--result", required=True)
    args, cli_args = parser.parse_known_args(argv)

    import lightning.pytorch as pl

    from lit_gpu.callbacks.speed import SpeedLevers
    from lit_gpu.cli.lightning_cli import LitGpuCLI

    plan = plan_mode(args.mode)
    # A throwaway CLI trainer on CPU: we only want the model, datamodule and speed levers.
    quiet = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto"]
    quiet += ["--trainer.logger", "false", "--trainer.precision", "32-true"]
    cli = LitGpuCLI(args=[*cli_args, *quiet], run=False)
    callbacks: list[pl.Callback] = [_make_monitor(args.result, args.warmup, args.steps)]
    callbacks += [cb for cb in cli.trainer.callbacks if isinstance(cb, SpeedLevers)]
    trainer = pl.Trainer(
        accelerator=plan.accelerator,
        devices=plan.devices,
        strategy=plan.strategy,
        precision=plan.precision,
        max_steps=args.steps,
        max_epochs=-1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(cli.model, datamodule=cli.datamodule)
    return 0


# ---- driver --------------------------------------------------------------------------------
# Python 3.10 has neither -P nor PYTHONSAFEPATH: `python -c` drops its working-folder entry itself.
_RUN_MODULE = (
    "import runpy, sys; sys.path[:1] = [p for p in sys.path[:1] if p]; "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


def child_python(module: str) -> tuple[list[str], dict[str, str]]:
    """``python -m MODULE`` and its environment, with the working folder kept off ``sys.path``.

    Python 3.11+: ``-P`` and ``PYTHONSAFEPATH=1`` (which Lightning's DDP launcher passes on to the
    ranks it starts); 3.10: a ``-c`` stub that removes the folder before running the module. Empty
    ``PYTHONPATH`` entries (a stray ``:``, which means the working folder) are dropped; the others
    are made absolute (``.`` stays the folder the user named).
    """
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = os.pathsep.join(
            os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p
        )
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module], env
    return [sys.executable, "-c", _RUN_MODULE, module], env


def run_mode(plan: ModePlan, cli_args: list[str], steps: int, warmup: int, timeout: float) -> BenchResult:
    """Fit ``plan`` for ``steps`` steps in a fresh subprocess and measure it (a skip plan is not run).

    Args:
        plan: The mode, from :func:`plan_mode`.
        cli_args: ``lit-gpu`` arguments of the job (``--config ...`` and flags).
        steps: Optimizer steps to run.
        warmup: First steps left out of the rates.
        timeout: Seconds before the run counts as failed.
    """
    if plan.skip:
        return BenchResult(plan.mode, status=f"skipped: {plan.skip}")
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd, env = child_python("lit_gpu")
        cmd += ["bench", "--worker", "--mode", plan.mode]
        cmd += ["--steps", str(steps), "--warmup", str(warmup), "--result", str(result_path), *cli_args]
        env.setdefault("PYTHONWARNINGS", "ignore")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return BenchResult(plan.mode, plan.label, status=f"failed: timed out after {timeout:.0f} s")
        if proc.returncode != 0 or not result_path.is_file():
            lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
            return BenchResult(
                plan.mode, plan.label, status=f"failed: {lines[-1] if lines else proc.returncode}"
            )
        data = read_json(result_path)
    metrics = data["metrics"]  # Throughput adds the global "samples_per_sec" only when world_size > 1
    device_rate = metrics.get("device/samples_per_sec")
    rate = metrics.get("samples_per_sec", device_rate * data["world_size"] if device_rate else None)
    epoch_samples = data["epoch_batches"] * data["batch_size"] * data["world_size"]
    return BenchResult(
        plan.mode,
        plan.label,
        samples_per_sec=rate,
        sec_per_epoch=epoch_samples / rate if rate else None,
        peak_mem_mib=data["peak_mem_mib"],
        mem_kind=data["mem_kind"],
        warmup_s=data["warmup_s"],
        extra={"steps": data["steps"], "world_size": data["world_size"], "batch_size": data["batch_size"]},
    )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_rows(results: list[BenchResult]) -> list[list[str]]:
    """Header + one row of strings per result."""
    rows = [["mode", "setup", "samples/s", "s/epoch", "warm-up s", "peak mem (MiB)", "speedup", "status"]]
    for r in results:
        mem = "-" if r.peak_mem_mib is None else f"{r.peak_mem_mib:.0f} ({r.mem_kind})"
        speed = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        rows.append(
            [
                r.mode,
                r.setup,
                _fmt(r.samples_per_sec, ".0f"),
                _fmt(r.sec_per_epoch, ".2f"),
                _fmt(r.warmup_s, ".2f"),
                mem,
                speed,
                r.status,
            ]
        )
    return rows


def to_markdown(results: list[BenchResult]) -> str:
    """The table as GitHub markdown."""
    rows = table_rows(results)
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines) + "\n"


def _print_table(results: list[BenchResult], title: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    rows = table_rows(results)
    table = Table(title=Text(messages.shown(title)))
    for i, name in enumerate(rows[0]):
        table.add_column(name, justify="right" if 2 <= i <= 6 else "left", overflow="fold")
    for row in rows[1:]:  # a status quotes the job's error: one safe line, never Rich markup
        table.add_row(*(Text(messages.shown(value)) for value in row))
    Console(width=max(120, Console().width)).print(table)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lit-gpu bench``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--worker" in argv:
        return run_worker(argv)
    parser = argparse.ArgumentParser(
        prog="lit-gpu bench",
        allow_abbrev=False,
        description="Run the same job for N steps under several modes and compare throughput.",
        epilog="Other arguments (e.g. --data.batch_size 256, --speed.channels_last true) go to the job.",
    )
    parser.add_argument("--config", action="append", required=True, help="job config (repeatable)")
    parser.add_argument(
        "--modes", default="cpu,gpu", help=f"comma list of {','.join(MODES)} (default cpu,gpu)"
    )
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per mode (default 100)")
    parser.add_argument(
        "--warmup", type=int, default=10, help="first steps left out of the rates (default 10)"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per mode before giving up")
    parser.add_argument("--csv", help="also write the table as CSV to this path")
    parser.add_argument("--markdown", help="also write the table as markdown to this path")
    args, job_args = parser.parse_known_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {messages.shown(', '.join(unknown))}; choose from {', '.join(MODES)}")
    if args.steps <= args.warmup + 1:
        parser.error(f"--steps ({args.steps:d}) must exceed --warmup ({args.warmup:d}) by at least 2")
    cli_args = [a for c in args.config for a in ("--config", c)] + job_args

    results: list[BenchResult] = []
    for mode in modes:
        plan = plan_mode(mode)
        result = run_mode(plan, cli_args, args.steps, args.warmup, args.timeout)
        print(
            messages.one_line(
                f"{mode}: {result.status}"
                + (f" ({result.samples_per_sec:.0f} samples/s)" if result.samples_per_sec else "")
            ),
            flush=True,
        )
        results.append(result)
    base = next((r.samples_per_sec for r in results if r.samples_per_sec), None)
    for r in results:
        if r.samples_per_sec and base:
            r.speedup = r.samples_per_sec / base
    _print_table(
        results, f"lit-gpu bench: {', '.join(args.config)}, {args.steps} steps ({args.warmup} warm-up)"
    )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerows(table_rows(results))
    if args.markdown:
        Path(args.markdown).write_text(to_markdown(results))
    return 0 if any(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
