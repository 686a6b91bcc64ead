"""Test-only modules and callbacks for the resume / failure tests (importable by CLI subprocesses)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.preemption import delegate_signal

#: the environment variable naming the global step at which :class:`SlowSteps` waits for the job's signal
HOLD_ENV = "LIT_GPU_TEST_HOLD_AT"
#: how long a held run waits for its signal before it fails the test (a test that forgot to send it)
HOLD_TIMEOUT_S = 300.0


class SlowSteps(pl.Callback):
    """Sleeps after every training step; rank 0 writes the global step to ``progress_file`` (atomically).

    With ``$LIT_GPU_TEST_HOLD_AT`` set to a step N, every process of the run waits after its first step at
    or past N (after writing the step) until a SIGTERM/SIGINT has reached its handler: a test that signals
    once ``progress_file`` says N cannot see the run end first, whatever the machine's speed. The handlers
    are watched from each batch start on (:class:`SignalWatch`), so a signal that came before the wait
    (after rank 0 wrote the step, before another rank got there) counts too.
    The variable (not a flag) keeps the command line, and so the saved config, the same across starts.
    """

    def __init__(self, seconds: float = 0.1, progress_file: str = "progress.txt") -> None:
        self.seconds = seconds
        self.progress_file = Path(progress_file)
        self._watch = SignalWatch()
        self._held = False

    def _hold_at(self) -> int | None:
        hold_at = os.environ.get(HOLD_ENV, "")
        return int(hold_at) if hold_at and not self._held else None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._hold_at() is not None:
            self._watch.arm()  # again each batch: a handler installed since is watched too

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.is_global_zero:  # one writer under DDP
            tmp = self.progress_file.with_suffix(".tmp")
            tmp.write_text(str(trainer.global_step))
            os.replace(tmp, self.progress_file)
        hold_at = self._hold_at()
        if hold_at is not None and trainer.global_step >= hold_at:
            self._held = True
            self._watch.wait()
        time.sleep(self.seconds)


class SignalWatch:
    """Notes a SIGTERM/SIGINT reaching this process's handlers, which it wraps (they do what they did).

    :meth:`arm` wraps the handlers installed now (lit_gpu's); the first signal puts them back and calls the
    one it wrapped (a handler that raises, e.g. Python's Ctrl+C, raises as it would anywhere).
    """

    def __init__(self) -> None:
        self.arrived: list[int] = []
        self._wrapped: dict[int, Any] = {}

        def noting(signum: int, frame: Any) -> None:
            self.arrived.append(signum)
            for sig, original in self._wrapped.items():
                if signal.getsignal(sig) is noting:
                    signal.signal(sig, original)
            delegate_signal(self._wrapped.get(signum, signal.SIG_DFL), signum, frame)

        self._noting = noting

    def arm(self) -> None:
        """Watch the handlers installed now (until the first signal)."""
        if self.arrived:
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            current = signal.getsignal(sig)
            if current is not self._noting:
                self._wrapped[sig] = current
                signal.signal(sig, self._noting)

    def wait(self, timeout: float = HOLD_TIMEOUT_S) -> int:
        """Block until a signal has come (now or since :meth:`arm`); its number."""
        self.arm()
        deadline = time.monotonic() + timeout
        while not self.arrived:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{HOLD_ENV}: no SIGTERM/SIGINT within {timeout:.0f} s")
            time.sleep(0.01)  # the handler runs between the sleeps
        return self.arrived[0]


class RecordRankProcess(pl.Callback):
    """Each rank writes ``rank<R>.json`` to ``out_dir``: its pid, parent pid and whether it was forked.

    "Forked" means started by :mod:`tests.helpers.forked_cli` (a run or its DDP ranks), not by a fresh
    ``python`` whose imports were its own.
    """

    def __init__(self, out_dir: str = "ranks") -> None:
        self.out_dir = Path(out_dir)

    def on_fit_start(self, trainer, pl_module) -> None:
        import json

        from tests.helpers.forked_cli import forked_here

        self.out_dir.mkdir(exist_ok=True)
        record = {"pid": os.getpid(), "ppid": os.getppid(), "forked": forked_here()}
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


class RecordStartStep(pl.Callback):
    """Rank 0 appends the global step each fit starts training at to ``record_file``, one a line."""

    def __init__(self, record_file: str = "start_steps.txt") -> None:
        self.record_file = Path(record_file)

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            with open(self.record_file, "a") as f:
                f.write(f"{trainer.global_step}\n")


class NaNAtStepModule(RegressionModule):
    """A regression module whose training loss becomes NaN (or inf) at global step ``bad_step``."""

    def __init__(self, *args, bad_step: int = 5, bad_value: str = "nan", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.bad_step = bad_step
        self.bad_value = float(bad_value)

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.trainer.global_step == self.bad_step:
            loss = loss * self.bad_value
        return loss


class OOMModule(RegressionModule):
    """Raises a CUDA-style out-of-memory error from ``training_step`` (a fake for CPU-only tests)."""

    def training_step(self, batch, batch_idx):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity)"
        )


class _KillingDataset(Dataset):
    def __init__(self, base: Dataset, kill_after: int) -> None:
        self.base = base
        self.kill_after = kill_after
        self.calls = 0

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        self.calls += 1
        if self.calls > self.kill_after and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)  # the worker process dies like an OOM-killed one
        return self.base[index]


class CrashingWorkerDataModule(SyntheticRegressionDataModule):
    """Synthetic data whose single DataLoader worker is SIGKILLed after ``kill_after`` samples."""

    def __init__(self, *args, kill_after: int = 96, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kill_after = kill_after

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            _KillingDataset(self.train_set, self.kill_after),
            batch_size=self.batch_size,
            num_workers=1,
            prefetch_factor=1,
        )


class KillAtStep(pl.Callback):
    """SIGKILLs its own process when batch ``step + 1`` is about to start (after step ``step``'s saves).

    A deterministic stand-in for a node that dies: no handler runs, nothing is flushed.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class KillAtStepFromEnv(pl.Callback):
    """:class:`KillAtStep` at the step in ``$LIT_GPU_TEST_KILL_AT`` (unset or empty: never).

    The command line (and so the saved config) stays the same from attempt to attempt, as a
    requeued job's does.
    """

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = os.environ.get("LIT_GPU_TEST_KILL_AT", "")
        if step and trainer.global_step == int(step):
            os.kill(os.getpid(), signal.SIGKILL)
