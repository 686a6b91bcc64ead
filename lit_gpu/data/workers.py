"""DataLoader workers that leave a job's SIGINT/SIGTERM to the main process.

Slurm, Kubernetes, spot instances and Ctrl+C signal the whole process group, DataLoader workers
included. A stock torch worker dies on a SIGTERM that does not come from its parent, and the main
process then reports "DataLoader worker ... is killed by signal: Terminated" instead of saving a
checkpoint. :func:`protect_workers` gives a loader a ``worker_init_fn`` after which its workers:

* ignore SIGINT (the main process raises KeyboardInterrupt and shuts them down);
* ignore a SIGTERM sent by anyone but their parent (the job's signal: the main process stops at the
  next step, saves ``last.ckpt`` and shuts them down as usual);
* still exit at once on a SIGTERM from their parent, as torch's own worker handler does (that is
  how the main process ends a stuck worker).

A worker never outlives a dead main process: torch's watchdog ends it within seconds.

The workers are started with SIGINT/SIGTERM blocked (the main process blocks them in its own thread for
the moment it starts them), so a job signal that lands between the fork and ``worker_init_fn`` waits
for the worker's own handling instead of killing it (torch's worker handler kills a worker on any
SIGTERM not sent by its parent).

Limit: SIGTERM stays blocked in the worker's threads, and a blocked signal is inherited by programs
the dataset code starts with ``subprocess`` (they then outlast a job-wide SIGTERM like the worker,
until the worker ends them with ``Popen.kill()`` or the scheduler's SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from lit_gpu.upstream.torch_hooks import has_own_worker_start, set_worker_start, worker_start_hook

__all__ = ["JobSignalSafeWorkerInit", "ignore_job_signals", "job_signals_blocked", "protect_workers"]


def _wait_for_sigterm() -> None:
    parent = os.getppid()
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == parent:
            os._exit(0)  # torch's worker handler does the same for its parent's SIGTERM


def ignore_job_signals() -> None:
    """In a DataLoader worker: ignore SIGINT and any SIGTERM not sent by the parent process.

    SIGTERM is blocked in the worker's main thread and read by a daemon thread with
    ``sigwaitinfo``, which knows the sender (a plain Python handler does not).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # discards a SIGINT pending since the fork
    if not hasattr(signal, "sigwaitinfo"):  # not on macOS/Windows: keep the default behaviour
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked since the fork: ignored now
    # a SIGTERM pending since the fork is read by the thread, which knows who sent it
    threading.Thread(target=_wait_for_sigterm, name="lit_gpu_sigterm", daemon=True).start()


@contextlib.contextmanager
def job_signals_blocked() -> Iterator[None]:
    """Block SIGINT/SIGTERM in the calling thread inside the block (processes forked there inherit it).

    A signal sent meanwhile waits (or is taken by another thread) and is handled as usual after the block.
    """
    if not hasattr(signal, "sigwaitinfo"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _StartWorkersBlocked:
    """A loader's ``_get_iterator`` that starts the workers with the job's signals blocked (see the module
    docstring); plain when the loader's ``worker_init_fn`` is not the job-signal-safe one (nothing in the
    worker would read a blocked SIGTERM)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __call__(self) -> Any:
        loader = self.loader
        get_iterator = worker_start_hook(loader)
        if not isinstance(loader.worker_init_fn, JobSignalSafeWorkerInit):
            return get_iterator(loader)
        with job_signals_blocked():
            return get_iterator(loader)


class JobSignalSafeWorkerInit:
    """A picklable ``worker_init_fn``: :func:`ignore_job_signals`, then the loader's own init function.

    Args:
        inner: The ``worker_init_fn`` the loader had (``None`` for none).
    """

    def __init__(self, inner: Callable[[int], Any] | None = None) -> None:
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        ignore_job_signals()
        if self.inner is not None:
            self.inner(worker_id)


def protect_workers(loader: Any, rank: int = 0) -> Any:
    """Give a DataLoader with workers the job-signal-safe ``worker_init_fn`` (idempotent).

    Works for any loader with ``num_workers`` and ``worker_init_fn`` attributes (torch's
    ``DataLoader``, torchdata's ``StatefulDataLoader``); other objects are returned unchanged.
    Workers started before the call keep their behaviour. A loader with torch's ``_get_iterator``
    starts its workers with SIGINT/SIGTERM blocked (an instance attribute; it pickles with the
    loader). A loader without an init function gets Lightning's worker seeding too when
    ``seed_everything(workers=True)`` asked for it.

    Args:
        loader: The data loader.
        rank: Global rank, for Lightning's worker seeding.

    Returns:
        ``loader`` itself.
    """
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
