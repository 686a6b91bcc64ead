"""The layout of a run, each of its rules once: which folders are runs, whose, what a start leaves.

A run is ``ROOT/lit_gpu/version_N/`` (``ROOT`` = ``trainer.default_root_dir``)::

    version_N/
      config.yaml  config.<n>.yaml   the config it ran with (a continued run's changes beside)
      metrics.csv  events.out.*      its training curves (CSV, TensorBoard)
      checkpoints/*.ckpt             last.ckpt, best-*.ckpt
      evaluations/<command>_<k>/     one folder per validate/test/predict of its checkpoints
      .lit_gpu.lock                  held (flock) by the process writing the run; gone at a clean end

* :func:`version_number` accepts only names lit_gpu makes (``version_0`` .. ``version_999999999``);
  anything else in a root (``version_abc``, absurd numbers, files) is ignored, never fatal.
* :class:`Run`: a run folder and its owner; :func:`list_runs` lists them, :func:`run_of_checkpoint` finds
  the run of a checkpoint from where the file is. A root several users can write (a group scratch folder)
  is not trusted: a run of another user is never chosen, continued, taken over or cleaned (:attr:`Run.mine`).
* :func:`is_start_file`: what a start writes before its first checkpoint (taken over or removed as one).
* :func:`cluster_checkpoint_number`: ``hpc_ckpt_N.ckpt``, Lightning's cluster checkpoints in ``ROOT``.
* :func:`own_folder`: the folder a run or an evaluation is made in (``ROOT/lit_gpu``, a run) must be a
  real folder (not a link) of this user (or of root): in a shared root another user cannot redirect
  runs into a folder of theirs by planting ``ROOT/lit_gpu`` as a link or a folder they own.

The lock and the claim of a folder are :mod:`lit_gpu.run.claim`'s. No Lightning here; nothing read from
these folders runs code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

DEFAULT_ROOT = "runs"  # trainer.default_root_dir unless the config names one
NAME = "lit_gpu"  # the folder between ROOT and the runs
VERSION_PREFIX = "version_"
CONFIG_NAME = "config.yaml"
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
_START_FILES = re.compile(r"^(config(\.\d+)?\.yaml|hparams\.yaml|events\.out\.tfevents\..*)$")
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
    by name when it leads out of its run (:func:`lit_gpu.run.links.refuse_escaping_link`).
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
    it by name (:func:`lit_gpu.run.links.escaping_links`) rather than to pass it over silently.
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
