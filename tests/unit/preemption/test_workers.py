"""Protected DataLoader workers survive the job's SIGINT/SIGTERM and still obey their parent."""

from __future__ import annotations

import copy
import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from lit_gpu.preemption import JobSignalSafeWorkerInit, protect_workers


class _Pids(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.01)
        return torch.tensor([index, os.getpid()])


def _record_init(worker_id: int) -> None:
    os.environ["LIT_GPU_TEST_INIT"] = str(worker_id)


class _InitSeen(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> str:
        return os.environ.get("LIT_GPU_TEST_INIT", "")


def _wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.integration
@pytest.mark.parametrize("protected", [True, False], ids=["protected", "stock"])
def test_job_sigterm_from_outside_does_not_kill_a_protected_worker(protected):
    loader = DataLoader(_Pids(), batch_size=4, num_workers=1, persistent_workers=True)
    if protected:
        protect_workers(loader)
    it = iter(loader)
    worker = int(next(it)[0, 1])
    # the job's signal comes from outside (Slurm, kubelet, a shell): not from the worker's parent
    if not protected:  # what torch does on its own: the crash report lit-gpu used to print
        with pytest.raises(RuntimeError, match="killed by signal: Terminated|exited unexpectedly"):
            subprocess.run(["kill", "-TERM", str(worker)], check=True)
            list(it)
        return
    subprocess.run(["kill", "-TERM", str(worker)], check=True)
    subprocess.run(["kill", "-INT", str(worker)], check=True)
    time.sleep(0.3)
    assert sum(len(batch) for batch in it) == 60  # the rest of the epoch, same worker
    assert worker in {int(pid) for pid in next(iter(loader))[:, 1]}
    del it, loader


def test_protected_worker_still_exits_on_its_parents_sigterm():
    loader = protect_workers(DataLoader(_Pids(), batch_size=4, num_workers=1, persistent_workers=True))
    it = iter(loader)
    worker = int(next(it)[0, 1])
    os.kill(worker, signal.SIGTERM)  # from the parent: how torch ends a stuck worker
    assert _wait_dead(worker)
    it._shutdown_workers()


def test_protect_workers_keeps_the_loaders_init_and_pickles():
    loader = protect_workers(
        DataLoader(_InitSeen(), batch_size=2, num_workers=1, worker_init_fn=_record_init)
    )
    assert isinstance(loader.worker_init_fn, JobSignalSafeWorkerInit)
    assert protect_workers(loader).worker_init_fn.inner is _record_init  # idempotent
    assert next(iter(loader)) == ["0", "0"]  # the user's init ran in the worker
    restored = pickle.loads(pickle.dumps(loader.worker_init_fn))  # spawn/forkserver need this
    assert restored.inner is _record_init


def test_loaders_without_workers_are_left_alone():
    loader = DataLoader(_Pids(), batch_size=4)
    assert protect_workers(loader).worker_init_fn is None
    assert protect_workers([1, 2, 3]) == [1, 2, 3]


def _sig_blocked(path: str) -> bool:
    text = Path(path).read_text()
    fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
    return bool(int(fields["SigBlk"], 16) & (1 << (signal.SIGTERM - 1)))


def test_protected_workers_start_with_the_job_signals_blocked_and_the_parent_keeps_its_mask():
    """A job signal landing between the fork and worker_init_fn waits for the worker's own handling."""
    loader = protect_workers(DataLoader(_Pids(), batch_size=4, num_workers=1, persistent_workers=True))
    assert copy.deepcopy(loader)._get_iterator.loader is not loader  # a copy starts its own workers
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    it = iter(loader)
    worker = int(next(it)[0, 1])
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
    assert _sig_blocked(f"/proc/{worker}/task/{worker}/status")  # the worker's main thread
    it._shutdown_workers()
