"""Stop cleanly on SIGINT / SIGTERM during fit: finish the step, save ``last.ckpt``, say how to resume.

Slurm, Kubernetes, spot instances and Ctrl+C signal the whole process group. :class:`CheckpointOnInterrupt`:

* SIGTERM and the first SIGINT only set Lightning's SIGTERM flag, checked at each step boundary and
  validation batch: the fit ends with ``SIGTERMException`` after the current step (under DDP the processes
  agree at a batch end with one boolean all-reduce; under gradient accumulation the stop waits for the
  optimizer step). Lightning's own SIGTERM handler (a collective inside a handler) is replaced, its
  launcher signalling kept; its Slurm requeue (SIGUSR1) is untouched;
* DataLoader workers ignore the job's signals (:func:`protect_workers`); a worker that dies of one all the
  same is part of the stop, not a crash; a death of unknown cause waits a moment for the job's signal;
* ``last.ckpt`` is written (job signals ignored meanwhile) to the run's checkpoint folder, one line says how
  to resume, and ``lit-gpu fit`` exits 130 (SIGINT) or 143 (SIGTERM). A second Ctrl+C raises at once.

Not a subclass of Lightning's ``OnExceptionCheckpoint``: that is a ``Checkpoint``, which Lightning orders
last, returns as ``trainer.checkpoint_callback`` and counts as the run's checkpointing (no default
``ModelCheckpoint`` then). The save on the exception is the same one call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints.io import clean_stale_temp_files
from lit_gpu.devices import requeue_problem
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import dataloader_worker_died
from lit_gpu.messages import command_word, resume_command
from lit_gpu.run.layout import CHECKPOINTS
from lit_gpu.upstream import (
    cancel_sigterm_stop,
    has_own_worker_start,
    install_dataloader_sigchld_handler,
    open_accumulation,
    replace_restored_handler,
    request_sigterm_stop,
    set_worker_start,
    worker_start_hook,
)

INTERRUPT_EXIT_CODE = 128 + signal.SIGINT  # 130: lit-gpu fit's exit status after a stop (shell convention)
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM  # 143
JOB_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what a scheduler, a spot instance or Ctrl+C stops a job with
WORKER_DEATH_GRACE_S = 2.0  # a worker died of unknown cause: how long to wait for the job's signal too

STOPPED_BY_SIGNAL = "stopped by {signal} at step {step} ({point}); saved {path}; resume with: {command}"
RESUME_WITHOUT_COMMAND = "lit-gpu fit <same arguments> --ckpt_path {path}"  # a Trainer built in Python
STOPPED_BEFORE_SAVE = "stopped by {signal} {where}; nothing to save"

_EXIT_CODE_ATTR = "lit_gpu_exit_code"  # on trainer.state: how a run stopped by a signal should exit
_STOPPED_BY_WORKER_ATTR = "lit_gpu_stop_by_worker"  # on trainer.state: the stop came as a worker's death
_COMMAND_ATTR = "lit_gpu_command"  # on trainer.state: the command line (after ``lit-gpu``) of this run
# where Lightning logs "Received SIGTERM" / "Detected KeyboardInterrupt" (lit_gpu prints its own line)
_SIGNAL_LOGGERS = (
    "lightning.pytorch.trainer.connectors.signal_connector",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
)


# ---- what a stop leaves: last.ckpt, one line, the exit status -------------------------------------------
def delegate_signal(previous: Any, signum: int, frame: FrameType | None) -> None:
    """Hand ``signum`` to the handler installed before one's own: call it, or for ``SIG_DFL`` put the
    default back and send the signal again (the process ends as it would have); ``SIG_IGN``: nothing."""
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def start_clean(trainer: pl.Trainer) -> None:
    """Forget how a former run of ``trainer`` stopped: a new run starts with no stop recorded."""
    setattr(trainer.state, _EXIT_CODE_ATTR, None)
    setattr(trainer.state, _STOPPED_BY_WORKER_ATTR, False)


def remember_command(trainer: pl.Trainer, command: list[str] | None) -> None:
    """Keep the run's command line (after ``lit-gpu``) on ``trainer``: the stop line's resume command."""
    setattr(trainer.state, _COMMAND_ATTR, None if command is None else list(command))


def resume_with(trainer: pl.Trainer, path: Path) -> str:
    """The command that continues *this* run: its own ``last.ckpt`` by path (shell-quoted), never ``last``
    (which would take whatever run of the same model is newer in the root)."""
    command = getattr(trainer.state, _COMMAND_ATTR, None)
    if command is None:
        return RESUME_WITHOUT_COMMAND.format(path=command_word(str(path)))
    return resume_command(command, str(path))


def stop_exit_code(trainer: pl.Trainer | None) -> int | None:
    """Exit status for ``trainer``'s last run if a signal stopped it (130 SIGINT, 143 SIGTERM), else None."""
    return None if trainer is None else getattr(trainer.state, _EXIT_CODE_ATTR, None)


def signal_stop_code(trainer: pl.Trainer | None, err: BaseException) -> int | None:
    """Exit status (130/143) when ``err`` ends a run that a signal stopped (Lightning's ``SystemExit``, or the
    error of a DataLoader worker the job's signal killed), else None."""
    by_worker = trainer is not None and getattr(trainer.state, _STOPPED_BY_WORKER_ATTR, False)
    return stop_exit_code(trainer) if isinstance(err, SystemExit) or by_worker else None


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
    path = checkpoint_folder(trainer) / (
        ModelCheckpoint.CHECKPOINT_NAME_LAST + ModelCheckpoint.FILE_EXTENSION
    )
    for cb in trainer.checkpoint_callbacks:  # before the save: the saved state names it too
        if isinstance(cb, ModelCheckpoint):
            cb.last_model_path = str(path)
    with _job_signals_ignored():  # a second signal must not abort the save that keeps the run
        trainer.save_checkpoint(path, weights_only=False)  # full: weights, optimizer, loops
    epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
    progress, batches = trainer.fit_loop.epoch_loop.batch_progress, trainer.num_training_batches
    point = messages.epoch_point(  # as metrics.csv and the bar name it: from 0, the batches done
        trainer.current_epoch,
        epochs,
        progress.current.processed,
        batches if batches != float("inf") else None,
    )
    point += messages.optimizer_steps_note(trainer.global_step, progress.total.processed)
    command = messages.shown(resume_with(trainer, path), limit=messages.LINE_MAX_CHARS)
    step = messages.logged_step(trainer)
    messages.tell(STOPPED_BY_SIGNAL.format(signal=name, step=step, point=point, path=path, command=command))


# ---- DataLoader workers that leave the job's SIGINT/SIGTERM to the main process -------------------------
# A stock worker dies on a SIGTERM not sent by its parent, and the main process then reports "DataLoader
# worker ... is killed by signal" instead of saving. Protected workers ignore SIGINT and a SIGTERM from
# anyone but their parent (they still exit on their parent's, as torch's handler does; torch's watchdog ends
# them when the main process dies). They start with both signals blocked, so a signal between the fork and
# worker_init_fn waits. Limit: programs the dataset starts with subprocess inherit the blocked SIGTERM.
def _wait_for_sigterm() -> None:
    parent = os.getppid()
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)  # torch's worker handler does the same for its parent's SIGTERM


def ignore_job_signals() -> None:
    """In a DataLoader worker: ignore SIGINT and any SIGTERM not sent by the parent process (SIGTERM is
    blocked and read by a daemon thread with ``sigwaitinfo``, which knows the sender)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards a SIGINT pending since the fork
    if not hasattr(signal, "sigwaitinfo"):  # not on macOS/Windows: keep the default behaviour
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked since the fork: ignored now
    threading.Thread(target=_wait_for_sigterm, name="lit_gpu_sigterm", daemon=True).start()


@contextlib.contextmanager
def job_signals_blocked() -> Iterator[None]:
    """Block SIGINT/SIGTERM in the calling thread inside the block (processes forked there inherit it)."""
    if not hasattr(signal, "sigwaitinfo"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _StartWorkersBlocked:
    """A loader's ``_get_iterator`` that starts job-signal-safe workers with the job's signals blocked."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __call__(self) -> Any:
        get_iterator = worker_start_hook(self.loader)
        if not isinstance(self.loader.worker_init_fn, JobSignalSafeWorkerInit):
            return get_iterator(self.loader)  # nothing in the worker would read a blocked SIGTERM
        with job_signals_blocked():
            return get_iterator(self.loader)


class JobSignalSafeWorkerInit:
    """A picklable ``worker_init_fn``: :func:`ignore_job_signals`, then the loader's own (``inner``)."""

    def __init__(self, inner: Callable[[int], Any] | None = None) -> None:
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        ignore_job_signals()
        if self.inner is not None:
            self.inner(worker_id)


def protect_workers(loader: Any, rank: int = 0) -> Any:
    """Give a loader with workers (torch's ``DataLoader``, torchdata's ``StatefulDataLoader``) the job-signal-
    safe ``worker_init_fn`` (idempotent; other objects unchanged) and, through torch's ``_get_iterator``,
    workers started with the signals blocked. Without an init function of its own it gets Lightning's worker
    seeding too where ``seed_everything(workers=True)`` asked for it (``rank``). Returns ``loader``."""
    if not getattr(loader, "num_workers", 0) or not hasattr(loader, "worker_init_fn"):
        return loader
    current = loader.worker_init_fn
    if isinstance(current, JobSignalSafeWorkerInit):
        return loader
    if current is None and int(os.environ.get("PL_SEED_WORKERS", 0)):
        from lightning.fabric.utilities.seed import pl_worker_init_function

        current = partial(pl_worker_init_function, rank=rank)  # what Lightning would have added
    loader.worker_init_fn = JobSignalSafeWorkerInit(current)
    if worker_start_hook(loader) is not None and not has_own_worker_start(loader):
        set_worker_start(loader, _StartWorkersBlocked(loader))  # torch's private hook (pinned in a test)
    return loader


def _protect_dataloader_workers(trainer: pl.Trainer, on_workers: Callable[[], None]) -> None:
    """Make every loader the trainer prepares job-signal-safe; ``on_workers()`` before one with workers is
    handed back (before its workers start)."""
    strategy = trainer.strategy
    original = strategy.process_dataloader
    if getattr(original, "_lit_gpu_protects_workers", False):
        return

    def process_dataloader(dataloader: object) -> object:
        loader = protect_workers(original(dataloader), rank=trainer.global_rank)
        if getattr(loader, "num_workers", 0):
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


def _worker_killed_by(err: BaseException | None) -> int | None:
    """SIGTERM or SIGINT if ``err`` (or its cause) is torch's report of a worker killed by that signal."""
    for raised in (err, getattr(err, "__cause__", None), getattr(err, "__context__", None)):
        text = str(raised) if isinstance(raised, RuntimeError) else ""
        for signum in JOB_SIGNALS if "DataLoader worker" in text else ():
            if f"killed by signal: {signal.strsignal(signum)}" in text:
                return signum
    return None


class _DropSignalLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.getMessage())
        return "Received SIGTERM" not in message and "Detected KeyboardInterrupt" not in message


# ---- the stop: CheckpointOnInterrupt --------------------------------------------------------------------
class CheckpointOnInterrupt(Callback):
    """On SIGINT or SIGTERM during fit, stop after the current step, save ``last.ckpt``, say how to resume.

    The checkpoint goes to the first ModelCheckpoint's folder (or ``default_root_dir/checkpoints``), written
    atomically by the CLI's checkpoint IO; ``lit-gpu fit`` exits 130 (SIGINT) or 143 (SIGTERM). At fit start,
    temp files a killed save left there are removed (:func:`lit_gpu.checkpoints.io.clean_stale_temp_files`).
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
        """A copy (pickle, ``deepcopy``, ``ddp_spawn``) is the callback before any run."""
        state = dict(self.__dict__)
        state.update(_trainer=None, _signal=None, _stage=None, _previous={}, _active=False, _open=False)
        state["_sigchld_inner"] = None
        return state

    def may_save_mid_step(self) -> bool:
        """Whether a save may land in the middle of a training step from now on: a signal came (a second one
        raises at once), or the handlers are not this process's (a first Ctrl+C raises anywhere)."""
        return not self._active or self._signal is not None

    # ---- signal handling ----------------------------------------------------------------
    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self._active:  # after the run (Lightning's teardown may re-install us): as before
            delegate_signal(self._previous.get(signum, signal.SIG_DFL), signum, frame)
            return
        first = self._signal is None
        if first:
            self._signal = signum
            self._forward(signum, frame)
        if self._stage == "predict" or (signum == signal.SIGINT and not first):
            raise KeyboardInterrupt  # the predict loop never checks the flag; a second Ctrl+C: now
        if self._trainer is not None and self._trainer.world_size == 1:
            self._request_stop()  # several processes decide together, at the next batch end

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        """What Lightning's SIGTERM handler did besides its flag: signal the processes its launcher started
        and call an earlier handler."""
        launcher = getattr(getattr(self._trainer, "strategy", None), "launcher", None)
        if launcher is not None and signum == signal.SIGTERM:
            with contextlib.suppress(Exception):
                launcher.kill(signum)
        previous = self._previous.get(signum)
        if signum == signal.SIGTERM and callable(previous):
            previous(signum, frame)

    def _on_sigchld(self, signum: int, frame: FrameType | None) -> None:
        """torch's SIGCHLD check, except that a worker killed by SIGTERM/SIGINT in a run is a stop signal."""
        if not callable(self._sigchld_inner):
            return
        try:
            self._sigchld_inner(signum, frame)
        except RuntimeError as err:
            killed_by = _worker_killed_by(err)
            if killed_by is None or not self._active:
                raise
            self._signal = self._signal or killed_by  # the job is being stopped, as if it came here
            if self._trainer is not None and self._trainer.world_size == 1:
                self._request_stop()

    def _guard_sigchld(self) -> None:
        """Install torch's DataLoader SIGCHLD handler (as the first loader with workers does) and ours over
        it; main thread only."""
        main = threading.current_thread() is threading.main_thread()
        if not (main and self._active and hasattr(signal, "SIGCHLD")):
            return
        if signal.getsignal(signal.SIGCHLD) != self._on_sigchld:
            install_dataloader_sigchld_handler()  # once per process; a later loader then keeps ours on top
            inner = signal.signal(signal.SIGCHLD, self._on_sigchld)
            if inner != self._on_sigchld:
                self._sigchld_inner = inner

    def _unguard_sigchld(self) -> None:
        inner, self._sigchld_inner = self._sigchld_inner, None
        main = threading.current_thread() is threading.main_thread()
        if inner is not None and main and signal.getsignal(signal.SIGCHLD) == self._on_sigchld:
            signal.signal(signal.SIGCHLD, inner)

    def _stop_signal_of_worker_death(self, err: BaseException) -> int | None:
        """The job's signal if ``err`` reports a DataLoader worker death that is part of a stop (killed by
        SIGTERM/SIGINT, or another death while a signal comes within ``WORKER_DEATH_GRACE_S``), else None."""
        if not self._active or dataloader_worker_died(err) is None:
            return None
        for raised in (err, err.__cause__, err.__context__):
            if raised is not None and (killed_by := _worker_killed_by(raised)) is not None:
                return self._signal or killed_by
        deadline = time.monotonic() + WORKER_DEATH_GRACE_S
        while self._signal is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the handler runs between the sleeps
        return self._signal

    def _request_stop(self) -> None:
        if self._trainer is not None and self._signal is not None and not self._open:
            request_sigterm_stop(self._trainer)  # the loops raise SIGTERMException at the next boundary

    def _sync_stop(self, trainer: pl.Trainer) -> None:
        """After a training batch: stop on every process at once if any got a signal (one boolean all-reduce;
        a process stopping alone would leave the others waiting in a collective). Evaluation batches may
        differ in count per process, so a signal during validation inside fit stops at the next step."""
        if self._world_size > 1:
            if trainer.strategy.reduce_boolean_decision(self._signal is not None, all=False):
                self._signal = self._signal or signal.SIGTERM
                request_sigterm_stop(trainer)
        elif self._signal is not None:
            self._request_stop()

    def _take_over_sigterm(self) -> None:
        """Replace the SIGTERM handler Lightning registered at run start by ours (which does its job)."""
        if self._active and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in JOB_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
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
        # after an exception Lightning's teardown restores the handlers it found at fit start (ours)
        for signum, previous in self._previous.items() if self._trainer is not None else ():
            replace_restored_handler(self._trainer, signum, self._handle, previous)

    # ---- hooks --------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # before Lightning registers its SLURM requeue handler, which can pass the job id to a shell
        unsafe = requeue_problem(os.environ)
        if unsafe is not None:
            raise LitGpuError(unsafe)
        self._trainer, self._signal, self._stage, self._open = trainer, None, stage, False
        start_clean(trainer)  # a new run of this trainer starts clean
        _protect_dataloader_workers(trainer, on_workers=self._guard_sigchld)  # every stage
        if stage == "fit" and trainer.is_global_zero:
            for removed in clean_stale_temp_files(checkpoint_folder(trainer)):
                messages.tell(messages.REMOVED_STALE_TEMP.format(file=removed))
        self._install()

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._world_size = trainer.world_size  # read at every batch end: fixed for the fit
        self._open = False
        self._take_over_sigterm()

    def on_sanity_check_start(self, *_: Any) -> None:
        self._take_over_sigterm()

    on_validation_start = on_test_start = on_predict_start = on_sanity_check_start

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._open = bool(open_accumulation(trainer))  # every process alike: no stop, no all-reduce
        if self._open and self._signal is not None:
            cancel_sigterm_stop(trainer)  # set during this batch: the stop waits for the step's end
        elif self._world_size > 1 or self._signal is not None:  # else nothing to do
            self._sync_stop(trainer)

    @override
    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        if trainer.world_size == 1 or trainer.state.fn != TrainerFn.FITTING:  # else agreed at a train batch
            self._request_stop()

    on_test_batch_end = on_validation_batch_end

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
        elif (signum := self._stop_signal_of_worker_death(exception)) is not None:
            by_worker = True  # a worker killed by the job's signal: a stop, not a crash
        self._uninstall()
        if signum is not None:
            save_stopped_run(trainer, signum, by_worker=by_worker)
