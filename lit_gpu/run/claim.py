"""The claim of a run folder: the lock of a run being written, and which folder a start takes.

* :class:`RunLock`: ``.lit_gpu.lock`` ``flock``-ed for as long as this process writes the run.
* :func:`claim_run`: the folder a new start writes into. A start killed before its first checkpoint
  leaves its folder with a lock no process holds; the next start of the same model takes that
  folder over (one run, one folder, however often a job is requeued). A new folder appears whole,
  lock inside, by ``rename`` of a private temp folder, so no process ever sees an unlocked new run.
* :func:`claim_evaluation`: ``evaluations/<command>_<k>`` of a run, a new one each time (``mkdir``).

The names and the listing are :mod:`lit_gpu.run.layout`'s.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lit_gpu.run.layout import (
    EVALUATION_RE,
    EVALUATIONS,
    LOCK_NAME,
    MAX_TRIES,
    NAME,
    VERSION_PREFIX,
    Run,
    is_start_file,
    list_runs,
    my_uid,
    own_folder,
    owner_of,
    real_dir,
)

_CLAIM_PREFIX = ".claim-"


# ---- the lock of a run being written ---------------------------------------------------------------
class RunLock:
    """``.lit_gpu.lock`` of a run folder, ``flock``-ed for as long as this process writes the run.

    The kernel drops the lock when the process dies (SIGKILL, OOM killer, node loss); the file stays,
    which is how the next start knows the folder was abandoned. :meth:`release` at a clean end
    removes the file first, so a finished run is never taken for an abandoned one.
    """

    def __init__(self, folder: Path, fd: int) -> None:
        self.folder = folder
        self.fd: int | None = fd
        _held_in_this_process(fd)

    @classmethod
    def create(cls, folder: Path) -> RunLock:
        """Create and hold the lock file of ``folder`` (a folder only this process can see yet)."""
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return cls(folder, fd)

    @classmethod
    def take(cls, folder: Path) -> RunLock | None:
        """The lock of an abandoned run (file there, no process holding it), now held; else ``None``."""
        path = folder / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.lstat(path).st_ino:  # released (unlinked) while we opened it
                raise OSError(errno.ESTALE, "lock file replaced")
            os.utime(fd)  # the lock file's time: when its current holder took the run over
        except OSError:
            os.close(fd)
            return None
        return cls(folder, fd)

    @classmethod
    def hold(cls, folder: Path) -> RunLock | None:
        """Hold the lock of a run this process continues (created if missing); ``None``: another holds it."""
        path = folder / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return cls(folder, fd)

    def __del__(self) -> None:
        if self.fd is not None and self.fd in _HELD_FDS:  # dropped without release(): the lock goes,
            _HELD_FDS.discard(self.fd)  # the file stays (a forked child's copy is closed already)
            with contextlib.suppress(OSError):
                os.close(self.fd)

    def release(self) -> None:
        """A clean end: remove the lock file, then let go of the lock."""
        if self.fd is None or self.fd not in _HELD_FDS:  # a forked child never ends its parent's run
            return
        with contextlib.suppress(OSError):
            os.unlink(self.folder / LOCK_NAME)
        _HELD_FDS.discard(self.fd)
        os.close(self.fd)
        self.fd = None


#: lock descriptors this process holds; a forked child (a DataLoader worker, a forked rank) closes its
#: copies at once, so that the lock dies with this process and not with its slowest child
_HELD_FDS: set[int] = set()
_FORK_HOOK: list[bool] = []


def _held_in_this_process(fd: int) -> None:
    _HELD_FDS.add(fd)
    if not _FORK_HOOK:  # registered on the first lock, never on import
        os.register_at_fork(after_in_child=_close_inherited_locks)
        _FORK_HOOK.append(True)


def _close_inherited_locks() -> None:
    """In a forked child: close the inherited lock descriptors (the parent's lock is not released:
    ``flock`` belongs to the open file, which the parent still holds)."""
    for fd in list(_HELD_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_FDS.clear()


def abandoned(run: Run) -> bool:
    """A start of ``run`` died before its first checkpoint: its lock file is there and no one holds it.

    Does not keep the lock (see :meth:`RunLock.take`).
    """
    if not run.mine or run.checkpoints():
        return False
    lock = RunLock.take(run.path)
    if lock is None:
        return False
    os.close(lock.fd)  # type: ignore[arg-type]
    return True


# ---- claiming the folder of a start -------------------------------------------------------------------
@dataclass
class Claim:
    """The folder a start writes into, its held lock, and whether an abandoned start's folder was taken."""

    folder: Path
    lock: RunLock
    taken_over: bool = False


def _take_over(parent: Path, same_model: Callable[[Path], bool]) -> Claim | None:
    for run in reversed(list_runs(parent)):  # the newest abandoned start of this model
        if not run.mine or run.checkpoints() or not same_model(run.path):
            continue
        lock = RunLock.take(run.path)
        if lock is None:
            continue
        if run.checkpoints():  # saved between the look and the lock: a run, not an abandoned start
            os.close(lock.fd)  # type: ignore[arg-type]
            continue
        _clear_start_files(run.path)
        return Claim(run.path, lock, taken_over=True)
    return None


def _clear_start_files(folder: Path) -> None:
    """Remove what the dead start wrote (config, hparams, metrics, events)."""
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            if is_start_file(entry.name, metrics=True) and stat.S_ISREG(entry.lstat().st_mode):
                entry.unlink()
    # temp files of its killed saves in checkpoints/ go with the fit's stale-temp cleanup (checkpoints.io)


def remove_dead_claims(parent: str | os.PathLike) -> None:
    """Remove the temp folders of claims killed before their rename (their lock is free), yours only."""
    parent = Path(parent)
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(_CLAIM_PREFIX) and real_dir(entry) and owner_of(entry) == my_uid():
                lock = RunLock.take(entry)
                if lock is not None:
                    shutil.rmtree(entry, ignore_errors=True)
                    os.close(lock.fd)  # type: ignore[arg-type]


def claim_run(
    root: str | os.PathLike, name: str = NAME, same_model: Callable[[Path], bool] | None = None
) -> Claim:
    """The folder of a new start: an abandoned start of the same model taken over, else a new ``version_N``.

    Args:
        root: ``trainer.default_root_dir``.
        name: The folder between the root and the runs.
        same_model: Whether an abandoned folder (its ``config.yaml``, if any) is of this config's
            model; ``None``: never take one over.

    A new folder is made as ``.claim-<random>`` with its lock inside, then renamed to the next free
    ``version_N`` (names held by anything, another user's folder or a stray file, are passed over).
    """
    parent = own_folder(Path(root) / name)
    remove_dead_claims(parent)
    if same_model is not None:
        taken = _take_over(parent, same_model)
        if taken is not None:
            return taken
    temp = parent / f"{_CLAIM_PREFIX}{uuid.uuid4().hex}"
    os.mkdir(temp)
    try:
        lock = RunLock.create(temp)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    runs = list_runs(parent)
    n = runs[-1].version + 1 if runs else 0
    for _ in range(MAX_TRIES):
        target = parent / f"{VERSION_PREFIX}{n}"
        if not os.path.lexists(target):
            try:
                os.rename(temp, target)  # an empty folder made there this instant would be replaced: none is
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise
            else:
                lock.folder = target
                return Claim(target, lock)
        n += 1
    lock.release()
    shutil.rmtree(temp, ignore_errors=True)
    raise OSError(errno.EEXIST, f"no free version_N folder in {parent}")


def claim_evaluation(run: str | os.PathLike, command: str) -> Path:
    """A new ``run/evaluations/<command>_<k>`` folder (``mkdir``: two evaluations never share one)."""
    base = Path(run) / EVALUATIONS
    own_folder(run)  # a run of yours, or ROOT/lit_gpu for an evaluation outside any run
    with contextlib.suppress(FileExistsError):
        os.mkdir(base)
    if not real_dir(base):
        raise NotADirectoryError(errno.ENOTDIR, "not a folder of the run", str(base))
    taken = [
        int(m.group(2))
        for p in base.iterdir()
        if (m := EVALUATION_RE.match(p.name)) and m.group(1) == command
    ]
    k = max(taken, default=-1) + 1
    for _ in range(MAX_TRIES):
        folder = base / f"{command}_{k}"
        try:
            os.mkdir(folder)
        except FileExistsError:
            k += 1
            continue
        return folder
    raise OSError(errno.EEXIST, f"no free {command}_k folder in {base}")
