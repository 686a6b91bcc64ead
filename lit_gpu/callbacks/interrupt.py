"""Stop cleanly on SIGINT / SIGTERM during fit: finish the step, save ``last.ckpt``, say how to resume.

Slurm (preemption, time limit), Kubernetes, spot instances and Ctrl+C signal the whole process
group. :class:`CheckpointOnInterrupt` makes that a clean stop:

* SIGTERM and the first SIGINT only set a flag; Lightning's own SIGTERM path
  (``trainer.received_sigterm``, checked at each step boundary and validation batch) then ends the
  fit with ``SIGTERMException`` after the current step, so the saved state is a step boundary;
  under DDP the processes agree on the stop at a batch end (one boolean all-reduce), and this
  handler replaces Lightning's SIGTERM handler (which runs a collective inside the handler); under
  gradient accumulation the stop waits for the end of the optimizer step's last micro-batch (a checkpoint
  holds no accumulated gradients);
* DataLoader workers ignore the job's signals (:func:`lit_gpu.data.workers.protect_workers`), so
  they cannot die first and turn the stop into a "worker killed" crash; a worker that dies of
  SIGTERM/SIGINT all the same (a loader started elsewhere, another start method) is part of the stop:
  torch's "worker killed" check (its SIGCHLD handler, which raises wherever the step is) records the
  signal instead of raising, and an error of a fetch that needed that worker ends the fit as the stop
  does (the fetch is at a step boundary). A worker death of unknown cause waits a moment for the job's
  signal to reach the main process too (a scheduler signals the processes in any order);
* ``last.ckpt`` is written (atomically with the CLI's checkpoint IO) in the run's checkpoint folder;
  ``lit-gpu fit`` prints one line and exits 130 (SIGINT) or 143 (SIGTERM), 128 + the signal number.

A second Ctrl+C before the step ends raises KeyboardInterrupt at once (``last.ckpt`` is still
saved); signals during the save itself are ignored. Lightning's Slurm
auto-requeue (SIGUSR1 + ``scontrol requeue``) is untouched: SIGTERM handlers are composed with
Lightning's, never replaced.

This room is the stop (the handlers, the agreement on it, the DataLoader workers' deaths); what the stop
leaves (``last.ckpt``, its line, the exit status) is :mod:`lit_gpu.callbacks.stopped_run`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.callbacks.stopped_run import (
    JOB_SIGNALS,
    checkpoint_folder,
    delegate_signal,
    save_stopped_run,
    start_clean,
)
from lit_gpu.checkpoints.io import clean_stale_temp_files
from lit_gpu.data.workers import protect_workers
from lit_gpu.errors import LitGpuError
from lit_gpu.launch_env import requeue_problem
from lit_gpu.translate import dataloader_worker_died
from lit_gpu.upstream.loops import (
    cancel_sigterm_stop,
    open_accumulation,
    replace_restored_handler,
    request_sigterm_stop,
)
from lit_gpu.upstream.torch_hooks import install_dataloader_sigchld_handler

# a DataLoader worker that died of unknown cause ("exited unexpectedly"): how long the fit waits for a
# job signal to reach the main process too before it reports the death as a crash
WORKER_DEATH_GRACE_S = 2.0


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


def _worker_killed_by(err: BaseException) -> int | None:
    """SIGTERM or SIGINT if ``err`` (or its cause) is torch's report of a worker killed by that signal."""
    for raised in (err, err.__cause__, err.__context__):
        text = str(raised) if isinstance(raised, RuntimeError) else ""
        if "DataLoader worker" in text:
            for signum in JOB_SIGNALS:
                if f"killed by signal: {signal.strsignal(signum)}" in text:
                    return signum
    return None


def _guard_worker_deaths(handler: Callable[[int, FrameType | None], Any]) -> Any:
    """Install torch's DataLoader SIGCHLD handler (what the first loader with workers does), then ``handler``
    over it; returns the handler it wraps. Main thread only (else ``None``, nothing changed)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGCHLD"):
        return None
    install_dataloader_sigchld_handler()  # once per process; a later loader then keeps ours on top
    inner = signal.getsignal(signal.SIGCHLD)
    signal.signal(signal.SIGCHLD, handler)
    return inner


def _protect_dataloader_workers(trainer: pl.Trainer, on_workers: Callable[[], None] | None = None) -> None:
    """Make every loader the trainer prepares (train/val/test/predict) job-signal-safe; ``on_workers`` is
    called before a loader with workers is handed back (before its workers start)."""
    strategy = trainer.strategy
    original = strategy.process_dataloader
    if getattr(original, "_lit_gpu_protects_workers", False):
        return

    def process_dataloader(dataloader: object) -> object:
        loader = protect_workers(original(dataloader), rank=trainer.global_rank)
        if on_workers is not None and getattr(loader, "num_workers", 0):
            on_workers()
        return loader

    process_dataloader._lit_gpu_protects_workers = True  # type: ignore[attr-defined]
    strategy.process_dataloader = process_dataloader  # type: ignore[method-assign]


def _unprotect_dataloader_workers(trainer: pl.Trainer | None) -> None:
    """Remove what :func:`_protect_dataloader_workers` set: a trainer after a run pickles as before it."""
    strategy = getattr(trainer, "strategy", None)
    own = vars(strategy).get("process_dataloader") if strategy is not None else None
    if getattr(own, "_lit_gpu_protects_workers", False):
        del strategy.process_dataloader


class CheckpointOnInterrupt(Callback):
    """On SIGINT or SIGTERM during fit, stop after the current step, save ``last.ckpt``, say how to resume.

    The checkpoint goes to the first ModelCheckpoint's folder (or ``default_root_dir/checkpoints``)
    and is written atomically by the CLI's checkpoint IO. ``lit-gpu fit`` then exits with status
    130 (SIGINT) or 143 (SIGTERM). Resume with ``--ckpt_path last``. At fit start, temp files left
    in that folder by a killed save are removed (see :func:`lit_gpu.checkpoints.io.clean_stale_temp_files`).
    """

    def __init__(self) -> None:
        self._trainer: pl.Trainer | None = None
        self._signal: int | None = None
        self._stage: str | None = None
        self._previous: dict[int, Any] = {}
        self._active = False
        self._world_size = 1
        self._log_filter = _DropSignalLogs()
        self._sigchld_inner: Any = None  # the SIGCHLD handler (torch's) under ours while we guard it
        self._open = False  # the last training batch left accumulated gradients: no stop before the step

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickle, ``deepcopy``, ``ddp_spawn``) is the callback before any run: the signal
        handlers and the trainer of a run in progress belong to this process."""
        state = dict(self.__dict__)
        state.update(_trainer=None, _signal=None, _stage=None, _previous={}, _active=False, _open=False)
        state["_sigchld_inner"] = None
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

    def _on_sigchld(self, signum: int, frame: FrameType | None) -> None:
        """torch's SIGCHLD check, except that a worker killed by SIGTERM/SIGINT in a run is a stop signal."""
        inner = self._sigchld_inner
        if not callable(inner):
            return
        try:
            inner(signum, frame)
        except RuntimeError as err:
            killed_by = _worker_killed_by(err)
            if killed_by is None or not self._active:
                raise
            self._worker_stopped(killed_by)

    def _worker_stopped(self, signum: int) -> None:
        """A DataLoader worker died of the job's ``signum``: the job is being stopped, as if it came here."""
        if self._signal is None:
            self._signal = signum
        trainer = self._trainer
        if trainer is not None and trainer.world_size == 1:
            self._request_stop()  # several processes decide together, at the next batch end

    def _guard_sigchld(self) -> None:
        if not hasattr(signal, "SIGCHLD"):  # Windows: torch has no such check either
            return
        if self._active and signal.getsignal(signal.SIGCHLD) != self._on_sigchld:
            inner = _guard_worker_deaths(self._on_sigchld)
            if inner is not None and inner != self._on_sigchld:
                self._sigchld_inner = inner

    def _unguard_sigchld(self) -> None:
        inner, self._sigchld_inner = self._sigchld_inner, None
        main = threading.current_thread() is threading.main_thread()
        if inner is not None and main and signal.getsignal(signal.SIGCHLD) == self._on_sigchld:
            signal.signal(signal.SIGCHLD, inner)

    def _stop_signal_of_worker_death(self, err: BaseException) -> int | None:
        """The job's signal if ``err`` reports a DataLoader worker death that is part of a stop, else None.

        Killed by SIGTERM/SIGINT: that signal. Another death (``exited unexpectedly``) while a signal came or
        comes within :data:`WORKER_DEATH_GRACE_S`: the signal. Else a crash (None).
        """
        if not self._active or dataloader_worker_died(err) is None:
            return None
        for raised in (err, err.__cause__, err.__context__):
            if raised is not None and (killed_by := _worker_killed_by(raised)) is not None:
                return self._signal or killed_by
        deadline = time.monotonic() + WORKER_DEATH_GRACE_S
        while self._signal is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the handler runs between the sleeps
        return self._signal

    def _delegate(self, signum: int, frame: FrameType | None) -> None:
        delegate_signal(self._previous.get(signum, signal.SIG_DFL), signum, frame)

    def _request_stop(self) -> None:
        trainer = self._trainer
        if trainer is not None and self._signal is not None and not self._open:
            # Lightning's flag (set by its own SIGTERM handler too): the loops raise
            # SIGTERMException at the next step boundary or evaluation batch.
            request_sigterm_stop(trainer)

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
                request_sigterm_stop(trainer)
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
        for signum in JOB_SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)
        self._active = True
        for name in _SIGNAL_LOGGERS:
            logging.getLogger(name).addFilter(self._log_filter)

    def _uninstall(self) -> None:
        if not self._active:
            return
        self._unguard_sigchld()
        self._active = False
        for name in _SIGNAL_LOGGERS:
            logging.getLogger(name).removeFilter(self._log_filter)
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                if signal.getsignal(signum) == self._handle and previous is not None:
                    signal.signal(signum, previous)
        # After an exception Lightning's teardown runs last and restores the handlers it found at
        # fit start (ours): make it restore the ones from before us instead.
        if self._trainer is not None:
            for signum, previous in self._previous.items():
                replace_restored_handler(self._trainer, signum, self._handle, previous)

    # ---- hooks --------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # before Lightning registers its SLURM requeue handler (after setup), which can pass the job id to a
        # shell: an id that is not a number never gets there
        unsafe = requeue_problem(os.environ)
        if unsafe is not None:
            raise LitGpuError(unsafe)
        self._trainer, self._signal, self._stage, self._open = trainer, None, stage, False
        start_clean(trainer)  # a new run of this trainer starts clean
        # every stage: a worker crash report hides the signal
        _protect_dataloader_workers(trainer, on_workers=self._guard_sigchld)
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
        self._open = False
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
        self._open = bool(open_accumulation(trainer))  # every process alike: no stop, no all-reduce
        if self._open and self._signal is not None:
            cancel_sigterm_stop(trainer)  # set during this batch: the stop waits for the step's end
        elif self._world_size > 1 or self._signal is not None:  # else nothing to do
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
        by_worker = False
        if isinstance(exception, KeyboardInterrupt | SIGTERMException):
            default = signal.SIGINT if isinstance(exception, KeyboardInterrupt) else signal.SIGTERM
            signum = self._signal or default
        elif (worker_signal := self._stop_signal_of_worker_death(exception)) is not None:
            signum, by_worker = (
                worker_signal,
                True,
            )  # a worker killed by the job's signal: a stop, not a crash
        else:
            self._uninstall()
            return
        self._uninstall()
        save_stopped_run(trainer, signum, by_worker=by_worker)
