"""Stop cleanly on SIGINT / SIGTERM during fit: finish the step, save ``last.ckpt``, say how to resume.

Slurm (preemption, time limit), Kubernetes, spot instances and Ctrl+C signal the whole process
group. :class:`CheckpointOnInterrupt` makes that a clean stop:

* SIGTERM and the first SIGINT only set a flag; Lightning's own SIGTERM path
  (``trainer.received_sigterm``, checked at each step boundary and validation batch) then ends the
  fit with ``SIGTERMException`` after the current step, so the saved state is a step boundary;
  under DDP the processes agree on the stop at a batch end (one boolean all-reduce), and this
  handler replaces Lightning's SIGTERM handler (which runs a collective inside the handler);
* DataLoader workers ignore the job's signals (:func:`lit_gpu.data.workers.protect_workers`), so
  they cannot die first and turn the stop into a "worker killed" crash;
* ``last.ckpt`` is written (atomically with the CLI's checkpoint IO) in the run's checkpoint folder;
  ``lit-gpu fit`` prints one line and exits 130 (SIGINT) or 143 (SIGTERM), 128 + the signal number.

A second Ctrl+C before the step ends raises KeyboardInterrupt at once (``last.ckpt`` is still
saved); signals during the save itself are ignored. Lightning's Slurm
auto-requeue (SIGUSR1 + ``scontrol requeue``) is untouched: SIGTERM handlers are composed with
Lightning's, never replaced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.data.workers import protect_workers
from lit_gpu.io import clean_stale_temp_files

# Exit status of ``lit-gpu fit`` after a stop by signal: 128 + the signal number, the shell convention.
INTERRUPT_EXIT_CODE = 128 + signal.SIGINT  # 130
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM  # 143

_JOB_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_EXIT_CODE_ATTR = "lit_gpu_exit_code"  # on trainer.state: how a run stopped by a signal should exit


def stop_exit_code(trainer: pl.Trainer | None) -> int | None:
    """Exit status for ``trainer``'s last run if a signal stopped it (130 SIGINT, 143 SIGTERM), else None."""
    return None if trainer is None else getattr(trainer.state, _EXIT_CODE_ATTR, None)


def is_signal_stop(err: BaseException) -> bool:
    """Whether ``err`` is the exit of a run stopped by SIGINT/SIGTERM (LitGpuCLI raises it with 130/143)."""
    return isinstance(err, SystemExit) and err.code in (INTERRUPT_EXIT_CODE, SIGTERM_EXIT_CODE)


class _DropSignalLogs(logging.Filter):
    """Drops Lightning's "Received SIGTERM" / "Detected KeyboardInterrupt" lines while lit_gpu handles
    the signal (it prints its own one-line summary)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.getMessage())
        return "Received SIGTERM" not in message and "Detected KeyboardInterrupt" not in message


# where Lightning logs them: its signal connector, and rank_zero_info (fabric's or pytorch's logger)
_SIGNAL_LOGGERS = (
    "lightning.pytorch.trainer.connectors.signal_connector",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)


def _protect_dataloader_workers(trainer: pl.Trainer) -> None:
    """Make every loader the trainer prepares (train/val/test/predict) job-signal-safe."""
    strategy = trainer.strategy
    original = strategy.process_dataloader
    if getattr(original, "_lit_gpu_protects_workers", False):
        return

    def process_dataloader(dataloader: object) -> object:
        return protect_workers(original(dataloader), rank=trainer.global_rank)

    process_dataloader._lit_gpu_protects_workers = True  # type: ignore[attr-defined]
    strategy.process_dataloader = process_dataloader  # type: ignore[method-assign]


def _unprotect_dataloader_workers(trainer: pl.Trainer | None) -> None:
    """Remove what :func:`_protect_dataloader_workers` set: a trainer after a run pickles as before it."""
    strategy = getattr(trainer, "strategy", None)
    own = vars(strategy).get("process_dataloader") if strategy is not None else None
    if getattr(own, "_lit_gpu_protects_workers", False):
        del strategy.process_dataloader


@contextlib.contextmanager
def _job_signals_ignored() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM inside the block (main thread only), then restore the handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _JOB_SIGNALS}
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
    return Path(trainer.default_root_dir) / "checkpoints"


class CheckpointOnInterrupt(Callback):
    """On SIGINT or SIGTERM during fit, stop after the current step, save ``last.ckpt``, say how to resume.

    The checkpoint goes to the first ModelCheckpoint's folder (or ``default_root_dir/checkpoints``)
    and is written atomically by the CLI's checkpoint IO. ``lit-gpu fit`` then exits with status
    130 (SIGINT) or 143 (SIGTERM). Resume with ``--ckpt_path last``. At fit start, temp files left
    in that folder by a killed save are removed (see :func:`lit_gpu.io.clean_stale_temp_files`).
    """

    def __init__(self) -> None:
        self._trainer: pl.Trainer | None = None
        self._signal: int | None = None
        self._stage: str | None = None
        self._previous: dict[int, Any] = {}
        self._active = False
        self._world_size = 1
        self._log_filter = _DropSignalLogs()

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickle, ``deepcopy``, ``ddp_spawn``) is the callback before any run: the signal
        handlers and the trainer of a run in progress belong to this process."""
        state = dict(self.__dict__)
        state.update(_trainer=None, _signal=None, _stage=None, _previous={}, _active=False)
        return state

    def may_save_mid_step(self) -> bool:
        """Whether a checkpoint may be written in the middle of a training step from now on: a signal
        came (a second one raises at once), or the handlers are not this process's (off the main thread,
        before or after a run), where a first Ctrl+C raises ``KeyboardInterrupt`` wherever it lands."""
        return not self._active or self._signal is not None

    # ---- signal handling ----------------------------------------------------------------
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self._active:  # after the run (Lightning's teardown may re-install us): as before
            self._delegate(signum, frame)
            return
        first = self._signal is None
        if first:
            self._signal = signum
            self._forward(signum, frame)
        if self._stage == "predict" or (signum == signal.SIGINT and not first):
            raise KeyboardInterrupt  # the predict loop never checks the flag; a second Ctrl+C: now
        trainer = self._trainer
        if trainer is not None and trainer.world_size == 1:
            self._request_stop()  # several processes decide together, at the next batch end

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        """What Lightning's SIGTERM handler did besides setting its flag: signal the processes its
        launcher started (``kill <pid>`` may reach only this one) and call an earlier handler."""
        launcher = getattr(getattr(self._trainer, "strategy", None), "launcher", None)
        if launcher is not None and signum == signal.SIGTERM:
            with contextlib.suppress(Exception):
                launcher.kill(signum)
        previous = self._previous.get(signum)
        if signum == signal.SIGTERM and callable(previous):
            previous(signum, frame)

    def _delegate(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _request_stop(self) -> None:
        trainer = self._trainer
        if trainer is not None and self._signal is not None:
            # Lightning's flag (set by its own SIGTERM handler too): the loops raise
            # SIGTERMException at the next step boundary or evaluation batch.
            trainer._signal_connector.received_sigterm = True

    def _sync_stop(self, trainer: pl.Trainer) -> None:
        """After a training batch: set the stop flag on every process at once if any got a signal.

        Lightning checks its flag on each process on its own; a process stopping one step before
        the others would leave them waiting in a collective. One boolean all-reduce per training
        batch (Lightning already broadcasts its flag at every step under DDP). Training batches are
        the same count on every process (gradient sync needs it); evaluation batches need not be,
        so they are never synced: a signal during validation inside fit stops at the next step.
        """
        if self._world_size > 1:
            if trainer.strategy.reduce_boolean_decision(self._signal is not None, all=False):
                self._signal = self._signal or signal.SIGTERM
                trainer._signal_connector.received_sigterm = True
        elif self._signal is not None:
            self._request_stop()

    def _eval_stop(self, trainer: pl.Trainer) -> None:
        """After an evaluation batch: stop there unless other processes must agree (fit under DDP)."""
        if trainer.world_size == 1 or trainer.state.fn != TrainerFn.FITTING:
            self._request_stop()

    def _take_over_sigterm(self) -> None:
        """Replace the SIGTERM handler Lightning registered at run start by ours (which does its job).

        Lightning's handler sets its flag on this process alone and, under DDP, calls a collective
        from inside the signal handler; both can hang a multi-process run.
        """
        if self._active and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _JOB_SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)
        self._active = True
        for name in _SIGNAL_LOGGERS:
            logging.getLogger(name).addFilter(self._log_filter)

    def _uninstall(self) -> None:
        if not self._active:
            return
        self._active = False
        for name in _SIGNAL_LOGGERS:
            logging.getLogger(name).removeFilter(self._log_filter)
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                if signal.getsignal(signum) == self._handle and previous is not None:
                    signal.signal(signum, previous)
        # After an exception Lightning's teardown runs last and restores the handlers it found at
        # fit start (ours): make it restore the ones from before us instead.
        connector = getattr(self._trainer, "_signal_connector", None)
        originals = getattr(connector, "_original_handlers", None)
        if isinstance(originals, dict):
            for signum, previous in self._previous.items():
                if originals.get(signum) == self._handle:
                    originals[signum] = previous

    # ---- hooks --------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer, self._signal, self._stage = trainer, None, stage
        setattr(trainer.state, _EXIT_CODE_ATTR, None)  # a new run of this trainer starts clean
        _protect_dataloader_workers(trainer)  # every stage: a worker crash report hides the signal
        if stage == "fit" and trainer.is_global_zero:
            for removed in clean_stale_temp_files(checkpoint_folder(trainer)):
                messages.tell(messages.REMOVED_STALE_TEMP.format(file=removed))
        self._install()

    @override
    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._take_over_sigterm()

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._world_size = trainer.world_size  # read at every batch end: fixed for the fit
        self._take_over_sigterm()

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._take_over_sigterm()

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._take_over_sigterm()

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._take_over_sigterm()

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        if self._world_size > 1 or self._signal is not None:  # else nothing to do: no Python call for it
            self._sync_stop(trainer)

    @override
    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._eval_stop(trainer)

    @override
    def on_test_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._eval_stop(trainer)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._uninstall()
        _unprotect_dataloader_workers(trainer)

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        _unprotect_dataloader_workers(trainer)  # a fit that raised gets no teardown hooks
        if not isinstance(exception, KeyboardInterrupt | SIGTERMException):
            self._uninstall()
            return
        default = signal.SIGINT if isinstance(exception, KeyboardInterrupt) else signal.SIGTERM
        signum = self._signal or default
        self._uninstall()
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
            messages.tell(messages.STOPPED_BEFORE_SAVE.format(signal=name, where=where))
            return
        last = ModelCheckpoint.CHECKPOINT_NAME_LAST + ModelCheckpoint.FILE_EXTENSION
        path = checkpoint_folder(trainer) / last
        for cb in trainer.checkpoint_callbacks:  # before the save: the saved state names it too
            if isinstance(cb, ModelCheckpoint):
                cb.last_model_path = str(path)
        with _job_signals_ignored():  # a second signal must not abort the save that keeps the run
            trainer.save_checkpoint(path, weights_only=False)  # full: weights, optimizer, loops
        epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else "?"
        messages.tell(  # epochs counted from 1, as the progress lines count them
            messages.STOPPED_BY_SIGNAL.format(
                signal=name,
                step=trainer.global_step,
                epoch=trainer.current_epoch + 1,
                epochs=epochs,
                path=path,
            )
        )
