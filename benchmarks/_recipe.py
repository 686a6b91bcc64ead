"""Shared helpers of the benchmark scripts: run a lit_gpu config, time it, describe the machine."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import lightning.pytorch as pl
import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"


def machine() -> str:
    """CPU model, cores, GPU (if any), torch version and date: the header of every result."""
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{cpu}, {os.cpu_count()} cores, {gpu}; torch {torch.__version__}, {torch.get_num_threads()} "
        f"intra-op threads; load avg {load:.1f}; {datetime.date.today().isoformat()}"
    )


class ForeignCpu:
    """CPU time other processes used while this benchmark ran, in cores (the load it did not make itself).

    The machine's busy time (``/proc/stat``: user, nice, system, irq, softirq, steal) minus this
    process's and its waited-for children's CPU time (``getrusage``), over the wall time. The load
    average cannot tell them apart: a benchmark whose own processes keep both cores busy reads as
    load 2 on a machine nobody else uses. None where ``/proc/stat`` is missing.
    """

    def __init__(self) -> None:
        self.start = self._now()

    @staticmethod
    def _now() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                ticks = [int(v) for v in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
        busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
        own = sum(
            r.ru_utime + r.ru_stime
            for r in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
        )
        return busy, own, time.monotonic()

    def split(self) -> tuple[float, float] | None:
        """(other processes' cores, this benchmark's own cores) since construction; None without them."""
        end = self._now()
        if self.start is None or end is None or end[2] <= self.start[2]:
            return None
        busy, own, wall = (b - a for a, b in zip(self.start, end, strict=True))
        return max(0.0, busy - own) / wall, own / wall


#: no ratio when the machine's 1-minute load average was above this before the run (2 cores)
MAX_LOAD = 1.5
#: no ratio when other processes used more than this many cores during the run
MAX_FOREIGN = 0.25


def ratio_noise(
    load_before: float,
    load_after: float,
    others: float | None,
    max_load: float = MAX_LOAD,
    max_foreign: float = MAX_FOREIGN,
) -> str | None:
    """Why a ratio measured under these loads is noise, or None when it may be reported.

    A benchmark that runs several processes of its own (the classic MNIST recipe: a main process and
    2 DataLoader workers, ~1.3 of the 2 cores) raises the load average itself, so with the CPU other
    processes used known (``others``, :class:`ForeignCpu`), the gate is the load before the run and
    that CPU. Without it (no ``/proc/stat``), the load before and after, as for one process.
    """
    if others is None:
        worst = max(load_before, load_after)
        return f"load {worst:.2f} (above {max_load})" if worst > max_load else None
    if load_before > max_load:
        return f"load {load_before:.2f} before the run (above {max_load})"
    if others > max_foreign:
        return f"other processes used {others:.2f} cores during the run (above {max_foreign})"
    return None


@contextlib.contextmanager
def in_tempdir() -> Iterator[Path]:
    """Run inside a fresh temporary folder (the CLI writes runs/ to the working directory)."""
    old = Path.cwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(old)


def sync(device: str) -> None:
    """Wait for queued CUDA work so that wall-clock timers are honest."""
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


class TrainClock(pl.Callback):
    """Times the training loop alone: ``on_train_start`` to ``on_train_end``.

    Leaves out what ``trainer.fit`` does around it (data setup, run folder, final checkpoint);
    synchronizes the GPU at both ends so that queued work is counted.
    """

    def __init__(self, device: str) -> None:
        self.device, self.t0, self.seconds = device, 0.0, 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sync(self.device)
        self.t0 = time.perf_counter()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sync(self.device)
        self.seconds = time.perf_counter() - self.t0


def run_recipe(
    config: str | Path,
    data_dir: str | Path,
    device: str = "cpu",
    seed: int = 42,
    extra: list[str] | None = None,
) -> dict[str, float]:
    """Fit then test a lit_gpu config; returns ``fit_s``, ``train_s``, ``test_s``, ``total_s``, ``test_acc``.

    Timed from the start of ``trainer.fit`` (data setup included) to the end of ``trainer.test``;
    building the CLI objects is not counted (the classic loop's setup is not either). ``train_s`` is
    the training loop alone (:class:`TrainClock`).
    """
    from lit_gpu.cli import LitGpuCLI

    args = ["--config", str(Path(config).resolve()), "--data.data_dir", str(Path(data_dir).resolve())]
    args += ["--data.download", "false", "--seed_everything", str(seed)]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    if device == "cuda":
        args += ["--trainer.accelerator", "gpu", "--trainer.devices", "1", "--data.storage", "gpu"]
    else:
        args += ["--trainer.accelerator", "cpu", "--trainer.devices", "1"]
    args += extra or []
    with in_tempdir():
        cli = LitGpuCLI(args=args, run=False)
        clock = TrainClock(device)
        cli.trainer.callbacks.append(clock)
        sync(device)
        t0 = time.perf_counter()
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        sync(device)
        t1 = time.perf_counter()
        results = cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)
        sync(device)
        t2 = time.perf_counter()
    return {
        "fit_s": t1 - t0,
        "train_s": clock.seconds,
        "test_s": t2 - t1,
        "total_s": t2 - t0,
        "test_acc": float(results[0]["test/acc"]),
    }
