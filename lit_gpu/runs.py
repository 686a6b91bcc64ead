"""Run folders: one run = one ``ROOT/lit_gpu/version_N`` folder, claimed atomically, found again by config.

``ROOT`` is ``trainer.default_root_dir`` (``runs`` by default). A run folder holds ``config.yaml``,
``metrics.csv``, the TensorBoard event file and ``checkpoints/``. This module is pure file logic:

* :func:`claim_version` creates ``version_N`` with ``os.mkdir`` (atomic: two processes never get the
  same folder); :func:`run_folder_for_process` hands DDP children the folder their rank 0 claimed;
* :func:`remove_if_unused` removes the folder of a run that failed before it logged or saved anything;
* finding earlier runs and reading their ``config.yaml`` is :mod:`lit_gpu.files.locate` and
  :mod:`lit_gpu.files.run_config` (files someone else may have written are read there only).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch import Callback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from typing_extensions import override

DEFAULT_ROOT = "runs"
DEFAULT_NAME = "lit_gpu"
LOGGER_KINDS = ("csv", "tensorboard")
CONFIG_NAME = "config.yaml"

_VERSION_RE = re.compile(r"^version_(\d+)$")
# what a run leaves behind before its first logged metric or checkpoint
_STARTUP_FILES = re.compile(r"^(config\.yaml|hparams\.yaml|events\.out\.tfevents\..*)$")


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
    """At setup, every rank adopts the run folder rank 0 claimed (DDP, multi-node, torchrun)."""

    def __init__(self, run: RunFolder) -> None:
        self.run = run

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        version = self.run.version if trainer.is_global_zero else None
        self.run.adopt(trainer.strategy.broadcast(version, src=0))
