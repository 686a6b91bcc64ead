"""Run folders: one run = one ``ROOT/lit_gpu/version_N`` folder, claimed atomically, found again by config.

``ROOT`` is ``trainer.default_root_dir`` (``runs`` by default). A run folder holds ``config.yaml``,
``metrics.csv``, the TensorBoard event file and ``checkpoints/``. This module is pure file logic:

* :func:`claim_version` creates ``version_N`` with ``os.mkdir`` (atomic: two processes never get the
  same folder); :func:`run_folder_for_process` hands DDP children the folder their rank 0 claimed;
* :func:`remove_if_unused` removes the folder of a run that failed before it logged or saved anything;
* :func:`find_runs` / :func:`pick_checkpoint` find earlier runs whose saved ``config.yaml`` names the
  same model and data classes (read with ``yaml.safe_load``; nothing is imported or built);
* :func:`config_beside` locates the ``config.yaml`` saved next to a checkpoint.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import yaml
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch import Callback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

DEFAULT_ROOT = "runs"
DEFAULT_NAME = "lit_gpu"
LOGGER_KINDS = ("csv", "tensorboard")
CONFIG_NAME = "config.yaml"

_VERSION_RE = re.compile(r"^version_(\d+)$")
# what a run leaves behind before its first logged metric or checkpoint
_STARTUP_FILES = re.compile(r"^(config\.yaml|hparams\.yaml|events\.out\.tfevents\..*)$")
_SKIPPED_KEYS = re.compile(r"optim|sched", re.IGNORECASE)  # not part of "which model" for matching


# ---- claiming a folder ----------------------------------------------------------------------------
def version_number(path: str | os.PathLike) -> int | None:
    """``N`` of a ``version_N`` folder name, else ``None``."""
    match = _VERSION_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def list_versions(parent: str | os.PathLike) -> list[Path]:
    """The ``version_N`` folders in ``parent``, by ``N``."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    found = [p for p in parent.iterdir() if p.is_dir() and version_number(p) is not None]
    return sorted(found, key=lambda p: version_number(p) or 0)


def claim_version(root: str | os.PathLike, name: str = DEFAULT_NAME) -> Path:
    """Create and return the next free ``root/name/version_N``.

    ``os.mkdir`` either creates the folder or fails with ``FileExistsError``, so two processes
    claiming at the same moment get two different folders; the loser tries ``N + 1``.
    """
    parent = Path(root) / name
    parent.mkdir(parents=True, exist_ok=True)
    versions = list_versions(parent)
    n = (version_number(versions[-1]) or 0) + 1 if versions else 0
    while True:
        folder = parent / f"version_{n}"
        try:
            os.mkdir(folder)
        except FileExistsError:
            n += 1
            continue
        return folder


def remove_if_unused(folder: str | os.PathLike) -> bool:
    """Remove a run folder that holds only start-up files (no metrics, no checkpoint); True if removed.

    Start-up files are ``config.yaml``, ``hparams.yaml``, TensorBoard event files and empty folders;
    anything else (``metrics.csv``, a checkpoint, a user's file) keeps the folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return False
    for path in folder.rglob("*"):
        if path.is_file() and not _STARTUP_FILES.match(path.name):
            return False
    shutil.rmtree(folder, ignore_errors=True)
    return not folder.exists()


# ---- which model a config describes ---------------------------------------------------------------
def _class_paths(node: Any, skip_key: str = "") -> list[str]:
    """Every ``class_path`` in a config tree, depth first, leaving out optimizer/scheduler subtrees."""
    if skip_key and _SKIPPED_KEYS.search(skip_key):
        return []
    found: list[str] = []
    if isinstance(node, Mapping):
        if isinstance(node.get("class_path"), str):
            found.append(node["class_path"])
        for key, value in node.items():
            if key != "class_path":
                found.extend(_class_paths(value, str(key)))
    elif isinstance(node, list | tuple):
        for value in node:
            found.extend(_class_paths(value, skip_key))
    return found


@dataclass(frozen=True)
class Signature:
    """Which model (module and its nets) and which data module a config builds."""

    model: tuple[str, ...]
    data: str | None

    @classmethod
    def of(cls, config: Mapping[str, Any] | None) -> Signature:
        """From a config mapping with ``model`` / ``data`` entries (a parsed or a saved config)."""
        config = config or {}
        data = config.get("data")
        data_class = data.get("class_path") if isinstance(data, Mapping) else None
        return cls(tuple(_class_paths(config.get("model"))), data_class)

    def matches(self, other: Signature) -> bool:
        """Same model classes, and same data class when both name one."""
        if not self.model or self.model != other.model:
            return False
        return self.data is None or other.data is None or self.data == other.data

    def describe(self) -> str:
        """``RegressionModule(SimpleModel) + SyntheticRegressionDataModule``."""
        if not self.model:
            return "unknown model"
        names = [p.rsplit(".", 1)[-1] for p in self.model]
        text = names[0] + (f"({', '.join(names[1:])})" if len(names) > 1 else "")
        return text + (f" + {self.data.rsplit('.', 1)[-1]}" if self.data else "")


def read_saved_config(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The ``config.yaml`` of a run folder as plain data (``yaml.safe_load``), or ``None``."""
    path = Path(folder) / CONFIG_NAME
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


# ---- finding earlier runs ---------------------------------------------------------------------------
@dataclass
class Run:
    """A ``version_N`` folder with what it holds."""

    folder: Path
    signature: Signature | None
    checkpoints: list[Path] = field(default_factory=list)

    def newest(self, prefix: str) -> Path | None:
        """Newest non-empty ``{prefix}*.ckpt`` of this run."""
        found = [p for p in self.checkpoints if p.name.startswith(prefix)]
        return max(found, key=lambda p: p.stat().st_mtime) if found else None

    def describe(self) -> str:
        """``version_3 (RegressionModule(SimpleModel) + ...; last.ckpt, best-...ckpt)``."""
        what = self.signature.describe() if self.signature else f"no {CONFIG_NAME}"
        names = sorted({p.name for p in self.checkpoints})
        ckpts = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") if names else "no checkpoint"
        return f"{self.folder.name} ({what}; {ckpts})"


def find_runs(parent: str | os.PathLike) -> list[Run]:
    """Every ``version_N`` run folder in ``parent`` (``ROOT/lit_gpu``), by ``N``."""
    runs = []
    for folder in list_versions(parent):
        saved = read_saved_config(folder)
        ckpt_dir = folder / "checkpoints"
        ckpts = [p for p in ckpt_dir.glob("*.ckpt") if p.is_file() and p.stat().st_size > 0]
        runs.append(Run(folder, Signature.of(saved) if saved is not None else None, ckpts))
    return runs


@dataclass
class Pick:
    """The checkpoint chosen for ``last``/``best`` (or ``None``) and every run that was looked at."""

    checkpoint: Path | None
    run: Run | None
    looked_at: list[Run]
    parents: list[Path]

    def listing(self, limit: int = 4) -> str:
        """What is there, newest first, for a one-line message."""
        if not self.looked_at:
            return "no runs"
        newest = sorted(self.looked_at, key=_run_age, reverse=True)
        text = ", ".join(r.describe() for r in newest[:limit])
        return text + (f" and {len(newest) - limit} more" if len(newest) > limit else "")


def _run_age(run: Run) -> float:
    times = [p.stat().st_mtime for p in run.checkpoints]
    return max(times) if times else run.folder.stat().st_mtime


def pick_checkpoint(parents: Iterable[str | os.PathLike], signature: Signature, which: str = "last") -> Pick:
    """Newest ``{which}*.ckpt`` among runs in ``parents`` whose saved config matches ``signature``.

    Args:
        parents: ``ROOT/NAME`` folders holding ``version_N`` runs.
        signature: The model/data classes of the config being run.
        which: ``"last"`` or ``"best"``: the checkpoint file name prefix.
    """
    parents = [Path(p) for p in parents]
    looked_at = [run for parent in parents for run in find_runs(parent)]
    best: tuple[float, Path, Run] | None = None
    for run in looked_at:
        if run.signature is None or not signature.matches(run.signature):
            continue
        ckpt = run.newest(which)
        if ckpt is not None and (best is None or ckpt.stat().st_mtime > best[0]):
            best = (ckpt.stat().st_mtime, ckpt, run)
    if best is None:
        return Pick(None, None, looked_at, parents)
    return Pick(best[1], best[2], looked_at, parents)


# ---- the config beside a checkpoint ------------------------------------------------------------------
def config_beside(ckpt_path: str | os.PathLike) -> Path | None:
    """The ``config.yaml`` of the run a checkpoint belongs to, or ``None``.

    Looks in the checkpoint's folder and its parent (``version_N/checkpoints/last.ckpt`` ->
    ``version_N/config.yaml``).
    """
    ckpt = Path(ckpt_path)
    for folder in (ckpt.parent, ckpt.parent.parent):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def root_of_checkpoint(ckpt_path: str | os.PathLike) -> Path | None:
    """``ROOT`` for a checkpoint at ``ROOT/NAME/version_N/checkpoints/X.ckpt``, else ``None``."""
    ckpt = Path(ckpt_path)
    if ckpt.parent.name != "checkpoints" or version_number(ckpt.parent.parent) is None:
        return None
    return ckpt.parent.parent.parent.parent


SUBCOMMANDS = ("fit", "validate", "test", "predict")


def _option_value(argv: Sequence[str], option: str) -> str | None:
    """Value of the last ``--option VALUE`` / ``--option=VALUE`` in ``argv``."""
    value = None
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(option + "="):
            value = arg.split("=", 1)[1]
    return value


def args_with_saved_config(argv: Sequence[str]) -> tuple[list[str], Path | None]:
    """Put ``--config <config.yaml beside the checkpoint>`` in front of the user's flags.

    For ``SUBCOMMAND --ckpt_path FILE`` with neither ``--config`` nor ``--model``: the run is rebuilt
    from the config it saved, in the root it ran in; flags given on the command line come later, so
    they override. Returns the new argv and the config used (``None``: argv unchanged).

    Raises:
        LitGpuError: The checkpoint has no ``config.yaml`` beside it and no config was given.
    """
    argv = list(argv)
    sub_index = next((i for i, a in enumerate(argv) if a in SUBCOMMANDS), None)
    if sub_index is None:
        return argv, None
    rest = argv[sub_index + 1 :]
    if any(a in ("-c", "--config", "--model") or a.startswith(("--config=", "--model=")) for a in argv):
        return argv, None
    ckpt = _option_value(rest, "--ckpt_path")
    if not ckpt or not Path(ckpt).is_file():
        return argv, None
    config = config_beside(ckpt)
    if config is None:
        folders = f"{Path(ckpt).parent} and {Path(ckpt).parent.parent}"
        raise LitGpuError(messages.NO_CONFIG_BESIDE.format(ckpt=ckpt, folders=folders))
    inserted = ["--config", str(config)]
    root = root_of_checkpoint(ckpt)
    if root is not None:
        inserted += ["--trainer.default_root_dir", str(root)]
    return argv[: sub_index + 1] + inserted + rest, config


# ---- the default loggers -----------------------------------------------------------------------------
def _rank() -> int:
    return int(getattr(rank_zero_only, "rank", 0) or 0)


class RunFolder:
    """``root/name/version_N``, shared by lit_gpu's loggers; claimed on first use, on global rank 0 only.

    The claim happens when a logger first needs its folder (Lightning creates the loggers'
    experiments on rank 0 when a run starts), so building a Trainer claims nothing, and other ranks
    never create folders: :class:`RunFolderSync` hands them rank 0's ``version`` at setup.

    Args:
        root: ``trainer.default_root_dir``.
        name: Folder between the root and the version folders.
    """

    def __init__(self, root: str | os.PathLike, name: str = DEFAULT_NAME) -> None:
        self.root = str(root)
        self.name = name
        self.claimed: Path | None = None  # the folder this process created
        self._version: str | None = None

    @property
    def version(self) -> str:
        """``version_N``; claims the folder on rank 0 the first time it is asked for."""
        if self._version is None:
            rank = _rank()
            if rank != 0:
                return f"version_pending_rank{rank}"  # replaced by rank 0's at setup; never created
            self.claimed = claim_version(self.root, self.name)
            self._version = self.claimed.name
        return self._version

    @property
    def path(self) -> Path:
        """The run folder."""
        return Path(self.root) / self.name / self.version

    def adopt(self, version: str) -> None:
        """Use the folder another rank claimed."""
        self._version = version

    def remove_if_unused(self) -> bool:
        """Remove the folder this process claimed if the run left nothing in it (a failed start)."""
        return self.claimed is not None and remove_if_unused(self.claimed)


def make_loggers(kinds: Sequence[str], run: RunFolder) -> list[Any]:
    """lit_gpu's loggers, all writing into ``run``'s one folder.

    Args:
        kinds: Any of :data:`LOGGER_KINDS` (``csv``: ``metrics.csv`` for ``lit-gpu plot``;
            ``tensorboard``: event files for ``tensorboard --logdir ROOT``), in this order;
            the first one's folder is the Trainer's ``log_dir``.
        run: The shared run folder.
    """
    loggers: list[Any] = []
    for kind in dict.fromkeys(kinds):
        if kind == "csv":
            loggers.append(RunCSVLogger(run))
        elif kind == "tensorboard":
            loggers.append(RunTensorBoardLogger(run))
        else:
            raise ValueError(f"unknown logger {kind!r}; choose from {', '.join(LOGGER_KINDS)}")
    return loggers


class _SharedRunVersion:
    """Mixin for a Lightning logger: the version (folder) is the shared :class:`RunFolder`'s."""

    run: RunFolder

    @property
    def version(self) -> str:
        return self.run.version


class RunCSVLogger(_SharedRunVersion, CSVLogger):
    """Lightning's ``CSVLogger`` whose version is the shared :class:`RunFolder`'s."""

    def __init__(self, run: RunFolder, **kwargs: Any) -> None:
        self.run = run
        super().__init__(save_dir=run.root, name=run.name, **kwargs)


class RunTensorBoardLogger(_SharedRunVersion, TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` whose version is the shared :class:`RunFolder`'s."""

    def __init__(self, run: RunFolder, **kwargs: Any) -> None:
        self.run = run
        kwargs.setdefault("default_hp_metric", False)
        super().__init__(save_dir=run.root, name=run.name, **kwargs)


class RunFolderSync(Callback):
    """At setup, every rank adopts the run folder rank 0 claimed (DDP, multi-node, torchrun).

    The folder is the one lit_gpu's loggers share (found on the trainer); without them it does nothing.
    """

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        run = next((lg.run for lg in trainer.loggers if isinstance(lg, _SharedRunVersion)), None)
        if run is not None:
            version = run.version if trainer.is_global_zero else None
            run.adopt(trainer.strategy.broadcast(version, src=0))
