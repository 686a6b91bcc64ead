"""The layout of a run, in one room: which folders are runs, whose they are, which one a start takes.

A run is ``ROOT/lit_gpu/version_N/`` (``ROOT`` = ``trainer.default_root_dir``)::

    version_N/
      config.yaml  config.<n>.yaml   the config it ran with (a continued run's changes beside)
      metrics.csv  events.out.*      its training curves (CSV, TensorBoard)
      checkpoints/*.ckpt             last.ckpt, best-*.ckpt
      evaluations/<command>_<k>/     one folder per validate/test/predict of its checkpoints
      .lit_gpu.lock                  held (flock) by the process writing the run; gone at a clean end

* :func:`version_number` accepts only names lit_gpu makes (``version_0`` .. ``version_999999999``);
  anything else in a root (``version_abc``, absurd numbers, files) is ignored, never fatal.
* :func:`list_runs`: the run folders of a ``ROOT/lit_gpu`` folder, each with its owner; a root
  several users can write (a group scratch folder) is not trusted: a run of another user is never
  chosen, continued, taken over or cleaned (:attr:`RunDir.mine`).
* :func:`claim_run`: the folder a new start writes into. A start killed before its first checkpoint
  leaves its folder with a lock no process holds; the next start of the same model takes that
  folder over (one run, one folder, however often a job is requeued). A new folder appears whole,
  lock inside, by ``rename`` of a private temp folder, so no process ever sees an unlocked new run.
* :func:`claim_evaluation`: ``evaluations/<command>_<k>`` of a run, a new one each time (``mkdir``).
* :func:`own_folder`: the folder a run or an evaluation is made in (``ROOT/lit_gpu``, a run) must be a
  real folder (not a link) of this user (or of root): in a shared root another user cannot redirect
  runs into a folder of theirs by planting ``ROOT/lit_gpu`` as a link or a folder they own.

No Lightning here; nothing read from these folders runs code.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

NAME = "lit_gpu"
CONFIG_NAME = "config.yaml"
METRICS_NAME = "metrics.csv"
CHECKPOINTS = "checkpoints"
EVALUATIONS = "evaluations"
LOCK_NAME = ".lit_gpu.lock"

_VERSION_RE = re.compile(r"^version_(0|[1-9][0-9]{0,8})$")  # ASCII digits, at most 9: names lit_gpu makes
_EVALUATION_RE = re.compile(r"^(fit|validate|test|predict)_(0|[1-9][0-9]{0,8})$")
_CLAIM_PREFIX = ".claim-"
# what a start leaves before its first checkpoint: a take-over removes these (its own run writes them again)
_START_FILES = re.compile(r"^(config(\.\d+)?\.yaml|hparams\.yaml|metrics\.csv|events\.out\.tfevents\..*)$")
_MAX_TRIES = 10_000


def version_number(path: str | os.PathLike) -> int | None:
    """``N`` of a ``version_N`` name lit_gpu could have made, else ``None`` (``version_abc``, 20 digits)."""
    match = _VERSION_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def _owner(path: Path) -> int | None:
    try:
        return path.lstat().st_uid
    except OSError:
        return None


def my_uid() -> int:
    """The user this process writes as (``geteuid``)."""
    return os.geteuid()


def owner_name(uid: int | None) -> str:
    """``alice (uid 1001)``, or ``uid 1001`` when the name is unknown."""
    if uid is None:
        return "an unknown user"
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


@dataclass(frozen=True)
class RunDir:
    """A ``version_N`` folder: a real folder (not a link) in its parent, and who owns it."""

    path: Path
    version: int
    owner: int | None

    @property
    def name(self) -> str:
        """``version_N``."""
        return self.path.name

    @property
    def mine(self) -> bool:
        """Owned by the user this process runs as."""
        return self.owner == my_uid()

    def checkpoints(self, prefix: str = "") -> list[Path]:
        """The non-empty ``{prefix}*.ckpt`` files in ``checkpoints/`` (real files, not links), by name."""
        folder = self.path / CHECKPOINTS
        found = []
        with contextlib.suppress(OSError):
            for entry in folder.iterdir():
                if entry.name.startswith(prefix) and entry.name.endswith(".ckpt") and _plain_file(entry):
                    found.append(entry)
        return sorted(found)


def _plain_file(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def list_runs(parent: str | os.PathLike) -> list[RunDir]:
    """The ``version_N`` run folders of ``parent`` (``ROOT/lit_gpu``), by ``N``; other names are ignored.

    Links named ``version_N`` are not runs here (a planted link would lead elsewhere), nor are files.
    """
    parent = Path(parent)
    runs = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return []
    for entry in entries:
        number = version_number(entry)
        if number is not None and _real_dir(entry):
            runs.append(RunDir(entry, number, _owner(entry)))
    return sorted(runs, key=lambda r: r.version)


def run_of_checkpoint(ckpt_path: str | os.PathLike) -> RunDir | None:
    """The run folder of ``.../version_N/checkpoints/X.ckpt`` (from where the file is), else ``None``.

    A ``version_N`` that is a link is returned too (its owner is the link's), for the caller to refuse
    it by name (:func:`lit_gpu.files.locate.escaping_links`) rather than to pass it over silently.
    """
    ckpt = Path(ckpt_path)
    run = ckpt.parent.parent
    number = version_number(run)
    if ckpt.parent.name != CHECKPOINTS or number is None or not run.is_dir():
        return None
    return RunDir(run, number, _owner(run))


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


def abandoned(run: RunDir) -> bool:
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
            if _START_FILES.match(entry.name) and stat.S_ISREG(entry.lstat().st_mode):
                entry.unlink()
    # temp files of its killed saves in checkpoints/ go with the fit's stale-temp cleanup (lit_gpu.io)


def remove_dead_claims(parent: str | os.PathLike) -> None:
    """Remove the temp folders of claims killed before their rename (their lock is free), yours only."""
    parent = Path(parent)
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(_CLAIM_PREFIX) and _real_dir(entry) and _owner(entry) == my_uid():
                lock = RunLock.take(entry)
                if lock is not None:
                    shutil.rmtree(entry, ignore_errors=True)
                    os.close(lock.fd)  # type: ignore[arg-type]


NOT_YOUR_FOLDER = (
    "{folder} is {what}, not a folder of yours, so no run is written there; use a folder of your own"
    " via --trainer.default_root_dir"
)


def own_folder(folder: str | os.PathLike) -> Path:
    """``folder`` made if missing (its parents too) and checked: a real folder owned by this user or root.

    The check opens the folder itself with ``O_NOFOLLOW`` and reads its owner from that descriptor
    (``fstat``), so a link swapped in between the ``mkdir`` and the check is refused, not followed. In a
    sticky shared root (mode 1777, as scratch folders are) no other user can then move it away.

    Raises:
        LitGpuError: A link, not a folder, or another user's folder (one line naming it and its owner).
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)  # the root the user named: theirs to choose
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(folder, flags)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        what = "a link" if os.path.islink(folder) else "not a folder"
        raise LitGpuError(NOT_YOUR_FOLDER.format(folder=messages.shown(folder), what=what)) from err
    try:
        uid = os.fstat(fd).st_uid
    finally:
        os.close(fd)
    if uid not in (my_uid(), 0):
        what = f"owned by {messages.shown(owner_name(uid))}"
        raise LitGpuError(NOT_YOUR_FOLDER.format(folder=messages.shown(folder), what=what))
    return folder


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
    for _ in range(_MAX_TRIES):
        target = parent / f"version_{n}"
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
    if not _real_dir(base):
        raise NotADirectoryError(errno.ENOTDIR, "not a folder of the run", str(base))
    taken = [
        int(m.group(2))
        for p in base.iterdir()
        if (m := _EVALUATION_RE.match(p.name)) and m.group(1) == command
    ]
    k = max(taken, default=-1) + 1
    for _ in range(_MAX_TRIES):
        folder = base / f"{command}_{k}"
        try:
            os.mkdir(folder)
        except FileExistsError:
            k += 1
            continue
        return folder
    raise OSError(errno.EEXIST, f"no free {command}_k folder in {base}")


def evaluations(run: str | os.PathLike) -> list[Path]:
    """The evaluation folders of a run (real folders named ``<command>_<k>``), by command and ``k``."""
    base = Path(run) / EVALUATIONS
    if not _real_dir(base):
        return []
    found = []
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            match = _EVALUATION_RE.match(entry.name)
            if match and _real_dir(entry):
                found.append((match.group(1), int(match.group(2)), entry))
    return [path for _, _, path in sorted(found)]
