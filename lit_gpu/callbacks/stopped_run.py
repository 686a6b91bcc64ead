"""What a run stopped by SIGINT / SIGTERM leaves: its ``last.ckpt``, one line, and its exit status.

:class:`~lit_gpu.callbacks.interrupt.CheckpointOnInterrupt` turns a job's signal into a stop at a step
boundary; this room is what happens once the stop is there: the full checkpoint written to the run's
checkpoint folder (job signals ignored while it is written, so a second one cannot abort the save that
keeps the run), the line that says where the run stopped and how to resume it, and the exit status
(128 + the signal number: 130 for SIGINT, 143 for SIGTERM) that ``lit-gpu fit`` reads back from the trainer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from lit_gpu import messages, numbering
from lit_gpu.messages import command_word, resume_command
from lit_gpu.run.layout import CHECKPOINTS

__all__ = [
    "INTERRUPT_EXIT_CODE",
    "JOB_SIGNALS",
    "SIGTERM_EXIT_CODE",
    "checkpoint_folder",
    "is_signal_stop",
    "remember_command",
    "resume_with",
    "save_stopped_run",
    "signal_stop_code",
    "start_clean",
    "stop_exit_code",
]

# Exit status of ``lit-gpu fit`` after a stop by signal: 128 + the signal number, the shell convention.
INTERRUPT_EXIT_CODE = 128 + signal.SIGINT  # 130
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM  # 143

#: the signals a scheduler, a spot instance or Ctrl+C stops a job with
JOB_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def delegate_signal(previous: Any, signum: int, frame: FrameType | None) -> None:
    """Hand ``signum`` to the handler that was installed before one's own: call it, or for ``SIG_DFL`` put
    the default back and send the signal again (the process ends as it would have); ``SIG_IGN``: nothing."""
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_EXIT_CODE_ATTR = "lit_gpu_exit_code"  # on trainer.state: how a run stopped by a signal should exit
_STOPPED_BY_WORKER_ATTR = "lit_gpu_stop_by_worker"  # on trainer.state: the stop came as a worker's death
_COMMAND_ATTR = "lit_gpu_command"  # on trainer.state: the command line (after ``lit-gpu``) of this run

STOPPED_BY_SIGNAL = "stopped by {signal} at step {step} ({point}); saved {path}; resume with: {command}"
#: without the command line (a Trainer built in Python): the run's own last.ckpt, named by its path
RESUME_WITHOUT_COMMAND = "lit-gpu fit <same arguments> --ckpt_path {path}"
STOPPED_BEFORE_SAVE = "stopped by {signal} {where}; nothing to save"


def start_clean(trainer: pl.Trainer) -> None:
    """Forget how a former run of ``trainer`` stopped: a new run starts with no stop recorded."""
    setattr(trainer.state, _EXIT_CODE_ATTR, None)
    setattr(trainer.state, _STOPPED_BY_WORKER_ATTR, False)


def remember_command(trainer: pl.Trainer, command: list[str] | None) -> None:
    """Keep the run's command line (after ``lit-gpu``) on ``trainer``: the stop line's resume command."""
    setattr(trainer.state, _COMMAND_ATTR, None if command is None else list(command))


def resume_with(trainer: pl.Trainer, path: Path) -> str:
    """The command that continues *this* run: its own ``last.ckpt`` by path (shell-quoted), never ``last``,
    which would take whatever run of the same model is newer in the root."""
    command = getattr(trainer.state, _COMMAND_ATTR, None)
    if command is None:
        return RESUME_WITHOUT_COMMAND.format(path=command_word(str(path)))
    return resume_command(command, str(path))


def stop_exit_code(trainer: pl.Trainer | None) -> int | None:
    """Exit status for ``trainer``'s last run if a signal stopped it (130 SIGINT, 143 SIGTERM), else None."""
    return None if trainer is None else getattr(trainer.state, _EXIT_CODE_ATTR, None)


def signal_stop_code(trainer: pl.Trainer | None, err: BaseException) -> int | None:
    """Exit status (130/143) when ``err`` ends a run that a signal stopped (``last.ckpt`` saved), else None.

    ``err`` is Lightning's ``SystemExit`` then, or the error of a DataLoader worker the job's signal killed.
    """
    stopped_by_worker = trainer is not None and getattr(trainer.state, _STOPPED_BY_WORKER_ATTR, False)
    return stop_exit_code(trainer) if isinstance(err, SystemExit) or stopped_by_worker else None


def is_signal_stop(err: BaseException) -> bool:
    """Whether ``err`` is the exit of a run stopped by SIGINT/SIGTERM (LitGpuCLI raises it with 130/143)."""
    return isinstance(err, SystemExit) and err.code in (INTERRUPT_EXIT_CODE, SIGTERM_EXIT_CODE)


@contextlib.contextmanager
def _job_signals_ignored() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM inside the block (main thread only), then restore the handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in JOB_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


def checkpoint_folder(trainer: pl.Trainer) -> Path:
    """The first ModelCheckpoint's folder, else ``<default_root_dir>/checkpoints``."""
    for cb in trainer.checkpoint_callbacks:
        dirpath = getattr(cb, "dirpath", None)  # a stand-in ModelCheckpoint (a spec'd Mock) may have none
        if isinstance(cb, ModelCheckpoint) and dirpath:
            return Path(dirpath)
    return Path(trainer.default_root_dir) / CHECKPOINTS  # Lightning's folder without a logger


def save_stopped_run(trainer: pl.Trainer, signum: int, *, by_worker: bool = False) -> None:
    """Record the stop by ``signum`` on ``trainer`` (its exit status), save ``last.ckpt`` if a fit has
    trained, and say so in one line; ``by_worker``: the stop came as a DataLoader worker's death."""
    if by_worker:
        setattr(trainer.state, _STOPPED_BY_WORKER_ATTR, True)  # LitGpuCLI exits with the code
    name = signal.Signals(signum).name
    setattr(trainer.state, _EXIT_CODE_ATTR, 128 + int(signum))  # read with stop_exit_code(trainer)
    where = None
    if trainer.state.fn != TrainerFn.FITTING:
        where = f"during {trainer.state.fn.value}"
    elif trainer.fast_dev_run:
        where = "during a fast_dev_run"
    elif trainer.sanity_checking or trainer.global_step == 0:
        where = "before the first training step"
    if where is not None:
        messages.tell(STOPPED_BEFORE_SAVE.format(signal=name, where=where))
        return
    last = ModelCheckpoint.CHECKPOINT_NAME_LAST + ModelCheckpoint.FILE_EXTENSION
    path = checkpoint_folder(trainer) / last
    for cb in trainer.checkpoint_callbacks:  # before the save: the saved state names it too
        if isinstance(cb, ModelCheckpoint):
            cb.last_model_path = str(path)
    with _job_signals_ignored():  # a second signal must not abort the save that keeps the run
        trainer.save_checkpoint(path, weights_only=False)  # full: weights, optimizer, loops
    epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
    progress = trainer.fit_loop.epoch_loop.batch_progress
    batches = trainer.num_training_batches
    messages.tell(  # named as metrics.csv and the bar name it: step and epoch from 0, the batches done
        STOPPED_BY_SIGNAL.format(
            signal=name,
            step=numbering.logged_step(trainer),
            point=numbering.epoch_point(
                trainer.current_epoch,
                epochs,
                progress.current.processed,
                batches if batches != float("inf") else None,
            )
            + numbering.optimizer_steps_note(trainer.global_step, progress.total.processed),
            path=path,
            command=messages.shown(resume_with(trainer, path), limit=messages.LINE_MAX_CHARS),
        )
    )
