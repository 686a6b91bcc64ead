"""The layout of a run, each of its rules once: names, which folders are runs and whose, the claim, links.

A run is ``ROOT/lit_gpu/version_N/`` (``ROOT`` = ``trainer.default_root_dir``)::

    version_N/
      config.yaml  config.<n>.yaml   the config it ran with (a continued run's changes beside)
      classes.yaml                   the model/data classes a CLI was built with (``model_class=``)
      metrics.csv  events.out.*      its training curves (CSV, TensorBoard)
      checkpoints/*.ckpt             last.ckpt, best-*.ckpt
      evaluations/<command>_<k>/     one folder per validate/test/predict of its checkpoints
      .lit_gpu.lock                  held (flock) by the process writing the run; gone at a clean end

* Names: :func:`version_number` accepts only names lit_gpu makes (``version_0`` .. ``version_999999999``);
  anything else in a root is ignored, never fatal. :class:`Run` is a run folder and its owner;
  :func:`list_runs`, :func:`run_of_checkpoint`. A root several users can write is not trusted: another
  user's run is never chosen, continued, taken over or cleaned (:attr:`Run.mine`); :func:`own_folder`
  refuses a planted ``ROOT/lit_gpu``. Lightning's cluster checkpoints: ``hpc_ckpt_N.ckpt`` in ``ROOT``.
* The claim: :class:`RunLock` (``.lit_gpu.lock`` ``flock``-ed while a process writes the run),
  :func:`claim_run` (a new ``version_N`` appears whole by ``rename``; an abandoned start of the same model
  is taken over), :func:`claim_evaluation`.
* Links: a run folder is written into only when nothing in it leads outside it (:func:`escaping_links`).
* Where a config's runs live, from the config being run, never from a file: :func:`of_config`.

No Lightning here; nothing read from these folders runs code.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lit_gpu import messages
from lit_gpu.checkpoints.contracts import inside
from lit_gpu.errors import LitGpuError

DEFAULT_ROOT = "runs"  # trainer.default_root_dir unless the config names one
NAME = "lit_gpu"  # the folder between ROOT and the runs
VERSION_PREFIX = "version_"
CONFIG_NAME = "config.yaml"
CLASSES_NAME = "classes.yaml"  # the classes a CLI was built with, where config.yaml names none
METRICS_NAME = "metrics.csv"
HPARAMS_NAME = "hparams.yaml"
CHECKPOINTS = "checkpoints"
EVALUATIONS = "evaluations"
LOCK_NAME = ".lit_gpu.lock"
CHECKPOINT_SUFFIX = ".ckpt"

_VERSION_RE = re.compile(r"^version_(0|[1-9][0-9]{0,8})$")  # ASCII digits, at most 9: names lit_gpu makes
#: ``config.<n>.yaml``: a continued run's changed config, beside ``config.yaml``
CONFIG_N_RE = re.compile(r"^config\.(0|[1-9][0-9]{0,8})\.yaml$")
EVALUATION_RE = re.compile(r"^(fit|validate|test|predict)_(0|[1-9][0-9]{0,8})$")
# what a start writes before its first checkpoint (its metrics.csv aside: see is_start_file)
_START_FILES = re.compile(r"^(config(\.\d+)?\.yaml|classes\.yaml|hparams\.yaml|events\.out\.tfevents\..*)$")
# Lightning's cluster (SLURM) checkpoints in ROOT: hpc_ckpt_<N>.ckpt, N as Lightning numbers them
_CLUSTER_RE = re.compile(r"^hpc_ckpt_(0|[1-9][0-9]{0,8})\.ckpt$")
CLUSTER_PREFIX = "hpc_ckpt_"
MAX_TRIES = 10_000


def version_number(path: str | os.PathLike) -> int | None:
    """``N`` of a ``version_N`` name lit_gpu could have made, else ``None`` (``version_abc``, 20 digits)."""
    match = _VERSION_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def owner_of(path: Path) -> int | None:
    """The uid owning ``path`` itself (a link's own), or ``None``."""
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
class Run:
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
        """The non-empty ``{prefix}*.ckpt`` in its ``checkpoints/`` (:func:`checkpoints_in`)."""
        return checkpoints_in(self.path / CHECKPOINTS, prefix)


def checkpoints_in(folder: str | os.PathLike, prefix: str = "") -> list[Path]:
    """The non-empty ``{prefix}*.ckpt`` files directly in ``folder``, by name; none when it cannot be listed.

    A link among them is listed too (a run holding one is no abandoned start), for the reader to refuse it
    by name when it leads out of its run (:func:`refuse_escaping_link`).
    """
    found = []
    with contextlib.suppress(OSError):
        for entry in Path(folder).iterdir():
            if not (entry.name.startswith(prefix) and entry.name.endswith(CHECKPOINT_SUFFIX)):
                continue
            with contextlib.suppress(OSError):
                if entry.is_file() and entry.stat().st_size > 0:
                    found.append(entry)
    return sorted(found)


def plain_file(path: Path) -> bool:
    """A real file (not a link), not empty."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0


def real_dir(path: Path) -> bool:
    """A real folder (not a link)."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def list_runs(parent: str | os.PathLike) -> list[Run]:
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
        if number is not None and real_dir(entry):
            runs.append(Run(entry, number, owner_of(entry)))
    return sorted(runs, key=lambda r: r.version)


def run_of_checkpoint(ckpt_path: str | os.PathLike) -> Run | None:
    """The run folder of ``.../version_N/checkpoints/X.ckpt`` (from where the file is), else ``None``.

    A ``version_N`` that is a link is returned too (its owner is the link's), for the caller to refuse
    it by name (:func:`escaping_links`) rather than to pass it over silently.
    """
    ckpt = Path(ckpt_path)
    run = ckpt.parent.parent
    number = version_number(run)
    if ckpt.parent.name != CHECKPOINTS or number is None or not run.is_dir():
        return None
    return Run(run, number, owner_of(run))


def is_start_file(name: str, metrics: bool = False) -> bool:
    """A file a start writes before its first checkpoint (``config.yaml``, ``hparams.yaml``, events...).

    Args:
        name: The file's name in the run folder.
        metrics: Count ``metrics.csv`` too (a start taken over: its rows go with it).
    """
    return bool(_START_FILES.match(name)) or (metrics and name == METRICS_NAME)


def is_config_name(name: str) -> bool:
    """``config.yaml`` or a continued run's ``config.<n>.yaml``."""
    return name == CONFIG_NAME or CONFIG_N_RE.match(name) is not None


def cluster_checkpoint_number(name: str) -> int | None:
    """``N`` of ``hpc_ckpt_N.ckpt`` (Lightning's cluster checkpoints), else ``None`` (``hpc_ckpt_.ckpt``)."""
    match = _CLUSTER_RE.match(name)
    return int(match.group(1)) if match else None


def cluster_checkpoints(root: str | os.PathLike) -> tuple[list[tuple[int, Path, int | None]], list[str]]:
    """Lightning's cluster checkpoints directly in ``root``: ``(N, path, owner)`` by ``N``, and odd names.

    Odd names: entries starting ``hpc_ckpt`` that are not ``hpc_ckpt_N.ckpt`` real non-empty files
    (a malformed name, a link, a folder, an empty file): never chosen.
    """
    found: list[tuple[int, Path, int | None]] = []
    odd: list[str] = []
    try:
        entries = list(Path(root).iterdir())
    except OSError:
        return [], []
    for entry in entries:
        if not entry.name.startswith(CLUSTER_PREFIX[:-1]):
            continue
        number = cluster_checkpoint_number(entry.name)
        if number is None or not plain_file(entry):
            odd.append(entry.name)
            continue
        found.append((number, entry, owner_of(entry)))
    return sorted(found, key=lambda f: f[0]), sorted(odd)


def next_cluster_checkpoint(root: str | os.PathLike) -> str:
    """Where a requeue save under SLURM writes (Lightning's ``hpc_save_path``): ``hpc_ckpt_N.ckpt`` after
    this user's newest one, at a name nobody holds. Lightning numbers it after every name in ``root`` that
    contains ``ckpt_``: a planted ``hpc_ckpt_.ckpt`` stops the save with a ``ValueError``, and another
    user's ``hpc_ckpt_999999999.ckpt`` pushes it to a number :func:`cluster_checkpoint_number` passes over.
    """
    found, _odd = cluster_checkpoints(root)
    me = my_uid()
    number = max((n for n, _path, owner in found if owner == me), default=0) + 1
    while os.path.lexists(Path(root) / f"{CLUSTER_PREFIX}{number}.ckpt"):
        number += 1
    return str(Path(root) / f"{CLUSTER_PREFIX}{number}.ckpt")


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


def evaluations(run: str | os.PathLike) -> list[Path]:
    """The evaluation folders of a run (real folders named ``<command>_<k>``), by command and ``k``."""
    base = Path(run) / EVALUATIONS
    if not real_dir(base):
        return []
    found = []
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            match = EVALUATION_RE.match(entry.name)
            if match and real_dir(entry):
                found.append((match.group(1), int(match.group(2)), entry))
    return [path for _, _, path in sorted(found)]


# ---- the claim: the lock of a run being written, and which folder a start takes ---------------------------
_CLAIM_PREFIX = ".claim-"


# ---- the lock of a run being written ----------------------------------------------------------------------
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


# ---- claiming the folder of a start -----------------------------------------------------------------------
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


def _claim_is_old(folder: Path, seconds: float = 10.0) -> bool:
    """Whether a claim's lock file was made more than ``seconds`` ago (between ``RunLock.create``'s open and
    its ``flock`` another process could otherwise take the lock and remove a live claim)."""
    try:
        return time.time() - (folder / LOCK_NAME).lstat().st_mtime > seconds
    except OSError:
        return False


def remove_dead_claims(parent: str | os.PathLike) -> None:
    """Remove the temp folders of claims killed before their rename (their lock is free), yours only."""
    parent = Path(parent)
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(_CLAIM_PREFIX) and real_dir(entry) and owner_of(entry) == my_uid():
                if not _claim_is_old(entry):  # a claim being made: its lock file exists before its flock
                    continue
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
        n += 1
        try:
            os.mkdir(target)  # the name is ours alone: rename replaces an empty folder, so take it first
        except FileExistsError:
            continue
        try:
            os.rename(temp, target)  # onto our own empty folder: the version appears whole
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise
        else:
            lock.folder = target
            return Claim(target, lock)
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


# ---- links that leave a run -------------------------------------------------------------------------------
RUN_FOLDER_LINKS_OUT = (
    "not continuing the run in {folder}: it holds links that lead outside it ({links}), so writing there "
    "would write outside; remove them, or pass --new_run true to log into a new folder"
)
CKPT_SYMLINK_LEAVES_RUN = (
    "--ckpt_path {which}: {path} is a symlink to {target}, outside its run folder {run}; pass the target "
    "itself if you trust it"
)


def runs_around(path: str | os.PathLike) -> list[Path]:
    """The run folders a checkpoint at ``path`` lies in (``version_N/checkpoints/X.ckpt``, ``version_N/X``).

    Its real path must stay inside them (the reader checks it: ``inspect(path, within=...)``).
    """
    ckpt = Path(path).absolute()
    return [run for run in (ckpt.parent.parent, ckpt.parent) if version_number(run) is not None]


def refuse_escaping_link(path: str | os.PathLike, which: str) -> None:
    """Refuse a checkpoint in ``.../version_N/checkpoints/`` whose real path leaves ``version_N``.

    Raises:
        LitGpuError: Naming the link and its target.
    """
    ckpt = Path(path).absolute()
    for run in runs_around(ckpt):
        if not inside(ckpt, run):
            raise LitGpuError(
                CKPT_SYMLINK_LEAVES_RUN.format(which=which, path=path, target=os.path.realpath(ckpt), run=run)
            )


def escaping_links(run: str | os.PathLike) -> list[str]:
    """Entries of a run folder (and of its ``checkpoints/``) that are symlinks leading outside it.

    A fit that continues a run folder writes there (``hparams.yaml``, ``metrics.csv``, ``config.N.yaml``,
    checkpoints); through such a link it would write outside. Dangling links count (their target is
    where a write would go), and so do files of the folder with more than one name (hard links: a
    write in place, as Lightning writes ``hparams.yaml``, would change the other name too). The run
    folder may be reached through links (``runs/`` on a scratch disk), but a ``version_N`` that is
    itself a link out of its ``ROOT/NAME`` is named. Returns ``"name -> target"`` texts.
    """
    folder = Path(run)
    found = []
    if version_number(folder) is not None and not inside(folder, folder.parent):
        found.append(f"{folder.name} itself -> {os.path.realpath(folder)}")  # a planted version_N link
    for parent in (folder, folder / CHECKPOINTS):
        try:
            entries = sorted(parent.iterdir()) if parent.is_dir() else []
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink() and not inside(entry, folder):
                found.append(f"{entry.relative_to(folder)} -> {os.path.realpath(entry)}")
            elif parent == folder and (names := _names(entry)) > 1:  # hparams.yaml & co.: written in place
                found.append(f"{entry.name} (a hard link: {names} names)")
    return found


def _names(path: Path) -> int:
    """How many names (hard links) a regular file has; 0 for links, folders and the missing."""
    try:
        info = path.lstat()
    except OSError:
        return 0
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 0


def refuse_links_out_of(run: str | os.PathLike, message: str = RUN_FOLDER_LINKS_OUT, **fields: Any) -> None:
    """Refuse to continue (write into) a run folder holding links that lead outside it.

    Args:
        run: The run folder.
        message: The refusal, formatted with ``folder``, ``links`` and ``fields`` (a sweep trial
            says it with its number and its own fix).

    Raises:
        LitGpuError: One line naming the links and the fix.
    """
    links = escaping_links(run)
    if links:
        shown = ", ".join(links[:3]) + (f" and {len(links) - 3} more" if len(links) > 3 else "")
        raise LitGpuError(message.format(folder=run, links=shown, **fields))


# ---- where a sub-command's runs live, from the config being run (never from a file) -----------------------
@dataclass
class Where:
    """Where a sub-command's runs live (from the config being run, not from any file)."""

    dirpath: str | None  # an explicit checkpoint.dirpath
    parents: list[Path]  # ROOT/NAME folders holding version_N runs
    mode: str = "min"  # checkpoint.mode: which monitored value is best
    monitor: str | None = None  # checkpoint.monitor
    root: Path | None = None  # trainer.default_root_dir: Lightning's cluster checkpoints lie there
    trust: bool = False  # the user's --weights_only false (never a file's)


def config_value(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of a Namespace or dict (dotted keys); ``default`` if absent or ``None``."""
    try:
        found = config[key]
    except (KeyError, TypeError, AttributeError):
        return default
    return default if found is None else found


def root_dir(config: Any) -> str:
    """``trainer.default_root_dir`` of a (sub-command) config: where its runs live."""
    return str(config_value(config, "trainer.default_root_dir", DEFAULT_ROOT))


def run_parents(config: Any) -> list[Path]:
    """``ROOT/NAME`` folders holding this config's ``version_N`` runs (a custom logger adds its own)."""
    parents = [Path(root_dir(config)) / NAME]
    logger = config_value(config, "trainer.logger")
    for entry in logger if isinstance(logger, list) else [logger]:
        init = config_value(entry, "init_args") if isinstance(entry, Namespace | dict) else None
        save_dir = config_value(init, "save_dir") if init is not None else None
        if save_dir is not None:
            parents.append(Path(save_dir) / str(config_value(init, "name", "lightning_logs")))
    return list(dict.fromkeys(parents))


def of_config(sub: Any) -> Where:
    """Where the runs of the sub-command config ``sub`` live; ``trust``: its ``weights_only`` is ``False``."""
    return Where(
        dirpath=config_value(sub, "checkpoint.dirpath"),
        parents=run_parents(sub),
        mode=str(config_value(sub, "checkpoint.mode", "min")),
        monitor=config_value(sub, "checkpoint.monitor"),
        root=Path(root_dir(sub)),
        trust=config_value(sub, "weights_only") is False,  # the user's flag, never a file's
    )


# ---- where a config's checkpoints lie (for the clean-up of killed saves) ----------------------------------
def checkpoint_patterns(root: str | os.PathLike, parents: Sequence[Path], dirpath: Any) -> list[str]:
    """Glob patterns of the folders where a config's runs keep checkpoints (its ``dirpath``, if given)."""
    if dirpath:
        return [str(dirpath)]
    runs = [str(parent / f"{VERSION_PREFIX}*" / CHECKPOINTS) for parent in parents]
    return [*runs, str(Path(root) / CHECKPOINTS)]  # runs without a logger


def _inside_its_run(folder: Path) -> bool:
    """``version_N/checkpoints`` (or ``ROOT/checkpoints``) really in its run, and the run in ``ROOT/NAME``.

    Links planted in a shared ``runs/`` (a ``checkpoints`` or ``version_N`` leading elsewhere) fail it;
    a ``runs/`` that is itself a link (a scratch disk) passes.
    """
    run = folder.parent
    if not inside(folder, run):
        return False
    return not run.name.startswith(VERSION_PREFIX) or inside(run, run.parent)


def checkpoint_folders(root: str | os.PathLike, parents: Sequence[Path], dirpath: Any) -> list[Path]:
    """The checkpoint folders of this user's runs, or the config's own ``dirpath`` (wherever it is).

    A run's ``checkpoints`` that is a link leading out of it, a ``version_N`` that is a link out of its
    ``ROOT/NAME``, and another user's run are left out: lit_gpu deletes nothing outside a run.
    """
    found = []
    for pattern in checkpoint_patterns(root, parents, dirpath):
        for folder in sorted(glob.glob(pattern)):
            folder = Path(folder)
            if dirpath or (_inside_its_run(folder) and owner_of(folder.parent) == my_uid()):
                found.append(folder)
    return found
