"""lit_gpu's loggers: CSV and TensorBoard, both writing into the one folder of a run (:mod:`lit_gpu.run`).

``ROOT`` is ``trainer.default_root_dir`` (``runs`` by default); the run folder they share, its claim,
continuation and evaluations are :class:`lit_gpu.run.folder.RunFolder`'s. Here:

* :func:`make_loggers`: lit_gpu's loggers (``--loggers csv tensorboard``) over one :class:`RunFolder`;
* :class:`MetricsWriter`: ``metrics.csv`` appended to (a continued run keeps its rows), and what a module
  sends to ``logger.experiment`` (``add_image`` & co: :mod:`lit_gpu.logger_media`);
* :class:`RunFolderSync`: every rank adopts rank 0's folder at setup (a default callback; old
  ``config.yaml`` files name it ``lit_gpu.runs.RunFolderSync``, new ones ``lit_gpu.callbacks.RunFolderSync``).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from typing_extensions import override

from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.files.text import METRICS_FIX, csv_header, read_csv
from lit_gpu.logger_media import MediaWriter
from lit_gpu.run.folder import RunFolder
from lit_gpu.run.layout import HPARAMS_NAME, METRICS_NAME

LOGGER_KINDS = ("csv", "tensorboard")


# ---- the default loggers -----------------------------------------------------------------------------
def make_loggers(kinds: Sequence[str], run: RunFolder) -> list[Any]:
    """lit_gpu's loggers, all writing into ``run``'s one folder.

    Args:
        kinds: Any of :data:`LOGGER_KINDS` (``csv``: ``metrics.csv`` for ``lit-gpu plot``;
            ``tensorboard``: event files for ``tensorboard --logdir ROOT``). TensorBoard's comes first
            whatever the order given, as in stock Lightning: it is the ``self.logger`` a module sees
            (``self.logger.experiment.add_image``); both share the folder (the Trainer's ``log_dir``).
            The CSV logger's experiment takes the same calls (a module looping over ``self.loggers``).
        run: The shared run folder.
    """
    unknown = [kind for kind in kinds if kind not in LOGGER_KINDS]
    if unknown:
        raise ValueError(f"unknown logger {unknown[0]!r}; choose from {', '.join(LOGGER_KINDS)}")
    loggers: list[Any] = []
    if "tensorboard" in kinds:
        loggers.append(RunTensorBoardLogger(run))
    if "csv" in kinds:
        loggers.append(RunCSVLogger(run))
    return loggers


class _SharedRunVersion:
    """Mixin for a Lightning logger: the version (folder) is the shared :class:`RunFolder`'s."""

    run: RunFolder

    @property
    def version(self) -> str:
        return self.run.version


class MetricsWriter(MediaWriter):
    """``metrics.csv`` (and ``hparams.yaml``) of a run folder; appends to the file already there.

    What Lightning's CSV experiment writer does, except that an existing ``metrics.csv`` (a continued
    run's) is kept and appended to, with its columns; a new column rewrites the file atomically.
    As the CSV logger's ``experiment``, it also answers TensorBoard ``SummaryWriter``'s calls
    (``add_image`` & co, :mod:`lit_gpu.logger_media`): a module that writes to every logger runs.

    Args:
        log_dir: The run folder.
    """

    NAME_METRICS_FILE = METRICS_NAME
    NAME_HPARAMS_FILE = HPARAMS_NAME

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.metrics_file_path = os.path.join(log_dir, METRICS_NAME)
        self.metrics: list[dict[str, Any]] = []
        self.hparams: dict[str, Any] = {}
        os.makedirs(log_dir, exist_ok=True)
        self.metrics_keys: list[str] = self._header()

    def _header(self) -> list[str]:
        try:
            return csv_header(self.metrics_file_path, fix=METRICS_FIX)
        except FileNotFoundError:
            return []

    def log_hparams(self, params: dict[str, Any]) -> None:
        """Record hyperparameters in ``hparams.yaml``."""
        self.hparams.update(params)
        save_hparams_to_yaml(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)

    def log_metrics(self, metrics_dict: dict[str, Any], step: int | None = None) -> None:
        """Record one row (written by :meth:`save`)."""
        row = {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in metrics_dict.items()}
        row["step"] = len(self.metrics) if step is None else step
        self.metrics.append(row)

    def save(self) -> None:
        """Append the recorded rows; rewrite the file first when they bring new columns."""
        if not self.metrics:
            return
        new_keys = sorted({k for row in self.metrics for k in row} - set(self.metrics_keys))
        exists = os.path.isfile(self.metrics_file_path)
        if new_keys:
            self.metrics_keys = sorted([*self.metrics_keys, *new_keys])
            if exists:
                _, old_rows = read_csv(self.metrics_file_path, fix=METRICS_FIX)
                with atomic_file(self.metrics_file_path, "w", newline="") as f:
                    writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
                    writer.writeheader()
                    writer.writerows(old_rows)
        with open(self.metrics_file_path, "a" if exists else "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
            if not exists:
                writer.writeheader()
            writer.writerows(self.metrics)
        self.metrics = []


class RunCSVLogger(_SharedRunVersion, CSVLogger):
    """Lightning's ``CSVLogger`` whose version is the shared :class:`RunFolder`'s.

    Its :class:`MetricsWriter` appends to the ``metrics.csv`` of a continued run (Lightning's own
    writer deletes an existing one).
    """

    def __init__(self, run: RunFolder, **kwargs: Any) -> None:
        self.run = run
        self._writer: MetricsWriter | None = None
        super().__init__(save_dir=run.root, name=run.name, **kwargs)

    @property
    @override
    @rank_zero_experiment
    def experiment(self) -> MetricsWriter:
        if self._writer is None:
            self._writer = MetricsWriter(self.log_dir)
        return self._writer

    @override
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        super().log_metrics(metrics, _step(self.run, step))

    @override
    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self.save()


def _step(run: RunFolder, step: int | None) -> int | None:
    """An evaluation logs at its checkpoint's step (``lit-gpu plot`` marks it there)."""
    fixed = run.fixed_step
    return step if fixed is None else fixed


class RunTensorBoardLogger(_SharedRunVersion, TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` whose version is the shared :class:`RunFolder`'s.

    In a continued run, its writer purges the events logged after the checkpoint (``purge_step``).
    """

    def __init__(self, run: RunFolder, **kwargs: Any) -> None:
        self.run = run
        kwargs.setdefault("default_hp_metric", False)
        if run.continues is not None:
            kwargs.setdefault("purge_step", run.continues.step)
        super().__init__(save_dir=run.root, name=run.name, **kwargs)

    @override
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics(metrics, _step(self.run, step))


class RunFolderSync(Callback):
    """At setup, every rank adopts the run folder rank 0 claimed or continues (DDP, multi-node, torchrun).

    The folder is the one lit_gpu's loggers share (found on the trainer); without them it does nothing.
    """

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        run = self._run(trainer)
        if run is not None:
            where = (run.version, run.root, run.name) if trainer.is_global_zero else None
            run.adopt(*trainer.strategy.broadcast(where, src=0))

    @staticmethod
    def _run(trainer: pl.Trainer) -> RunFolder | None:
        return next((lg.run for lg in trainer.loggers if isinstance(lg, _SharedRunVersion)), None)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """In a continued run, the ``last.ckpt`` there is this run's: overwrite it (no ``last-v1.ckpt``).

        Lightning adds ``-vN`` to a ``last`` name that exists and is not its ``last_model_path``,
        which a checkpoint restores only when its folder path is unchanged (and a stop by signal
        saves before it is set). Runs after the checkpoint state was restored.
        """
        run = self._run(trainer)
        if run is None or run.continues is None:
            return
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.dirpath:
                last = os.path.join(callback.dirpath, callback.CHECKPOINT_NAME_LAST + callback.FILE_EXTENSION)
                if os.path.isfile(last) and Path(callback.dirpath).parent == run.path:
                    callback.last_model_path = last
