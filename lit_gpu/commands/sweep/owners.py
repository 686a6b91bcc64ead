"""Which worker runs which trial: owner records, heartbeats, and stale trials to continue.

Every running trial has an owner record ``<sweep_dir>/.owners/version_N.json``
(:mod:`lit_gpu.files.sweep_storage`): the worker's pid and host, the start time of that
process, and a heartbeat refreshed every :data:`HEARTBEAT_S` seconds by a thread. A RUNNING
trial of the study is *stale*, and the next worker that looks continues it from its ``last.ckpt``,
when

* its worker stopped on SIGINT/SIGTERM (record ``state: stopped``, written after ``last.ckpt``);
* its worker ran on this host and neither it nor its trial process is alive (SIGKILL, OOM killer);
* its worker ran on another host and its heartbeat is older than :data:`STALE_AFTER_S` (node lost);
* it has no record and started more than :data:`STALE_AFTER_S` ago.

This works the same on a journal file and on any RDB: it needs no storage feature, only the sweep
folder (a worker can continue a trial only where it sees that trial's folder anyway). Claims are
made under a file lock in the sweep folder, so two workers never continue the same trial.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.files.sweep_storage import Owner

HEARTBEAT_S = 30.0
STALE_AFTER_S = 180.0
LOCK_NAME = ".trial_claims.lock"


def write_owner(path: Path, owner: Owner) -> None:
    """Write the owner record atomically (a fresh temp name: never through a planted link)."""
    with atomic_file(path, "w") as f:
        f.write(json.dumps(asdict(owner)))


def remove_owner(path: Path) -> None:
    """Drop the owner record (the trial is finished)."""
    with contextlib.suppress(OSError):
        path.unlink()


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` from ``/proc`` (``None`` where unknown): tells a reused pid apart."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def alive(pid: int | None, started: str | None) -> bool:
    """Whether process ``pid`` (started at ``started``) still runs on this host."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = process_start(pid)
    return started is None or now is None or now == started


def stale_reason(owner: Owner | None, started_at: dt.datetime | None, now: float | None = None) -> str | None:
    """Why a RUNNING trial with this owner record may be continued by another worker, else ``None``."""
    now = time.time() if now is None else now
    if owner is None:
        age = None if started_at is None else dt.datetime.now() - started_at
        if age is None or age.total_seconds() > STALE_AFTER_S:
            return "its worker left no record"
        return None
    if owner.state == "stopped":
        return "stopped by a signal"
    if owner.host == socket.gethostname():
        if alive(owner.pid, owner.started) or alive(owner.child_pid, owner.child_started):
            return None
        return f"its worker (pid {owner.pid}) died"
    if now - owner.beat > STALE_AFTER_S:
        return f"no heartbeat from {owner.host} for {now - owner.beat:.0f} s"
    return None


@contextlib.contextmanager
def claims_lock(sweep_dir: Path) -> Iterator[None]:
    """Exclusive lock of the sweep folder while a worker picks its next trial."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / LOCK_NAME, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class Heartbeat:
    """This worker's owner record of its current trial, refreshed by a daemon thread."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.owner: Owner | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, path: Path) -> None:
        """Claim the trial whose owner record is ``path`` (under :func:`claims_lock`); start beating."""
        pid = os.getpid()
        self.path = path
        self.owner = Owner(pid=pid, host=socket.gethostname(), beat=time.time(), started=process_start(pid))
        write_owner(path, self.owner)
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="lit-gpu-sweep-heartbeat", daemon=True)
        self._thread.start()

    def set_child(self, pid: int) -> None:
        """Record the trial's child process (it may outlive this worker for a moment)."""
        with self._lock:
            if self.owner is not None and self.path is not None:
                self.owner.child_pid, self.owner.child_started = pid, process_start(pid)
                write_owner(self.path, self.owner)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock, contextlib.suppress(OSError):
                if self.owner is not None and self.path is not None:
                    self.owner.beat = time.time()
                    write_owner(self.path, self.owner)

    def stop(self, stopped: bool) -> None:
        """End the heartbeat: ``stopped`` leaves the record for the next worker, else it is removed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self.path is not None and self.owner is not None:
                if stopped:
                    self.owner.state = "stopped"
                    write_owner(self.path, self.owner)
                else:
                    remove_owner(self.path)
            self.path, self.owner, self._thread = None, None, None
