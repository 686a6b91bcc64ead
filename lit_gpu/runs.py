"""Run folders and lit_gpu's loggers: one run = one ``ROOT/lit_gpu/version_N`` folder, evaluations inside it.

``ROOT`` is ``trainer.default_root_dir`` (``runs`` by default). The layout (which folders are runs, whose,
the lock of a run being written, ``evaluations/``) is :mod:`lit_gpu.files.layout`'s; this module is the
writing side:

* :class:`RunFolder`: the folder lit_gpu's loggers share, claimed on global rank 0 when a run starts
  (:func:`lit_gpu.files.layout.claim_run`: a new ``version_N``, or the folder of a start of the same
  model that died before its first checkpoint), continued (a fit resumed from a checkpoint of one of
  your runs: :func:`continuation`), or, for ``validate``/``test``/``predict``, a new
  ``evaluations/<command>_<k>`` inside the run of the checkpoint evaluated (:func:`evaluation`);
* :func:`remove_if_unused` removes the folder of a run that failed before it logged or saved anything;
* :func:`continue_run`: a continued run's ``metrics.csv`` rows written after the checkpoint are dropped
  (and the TensorBoard events purged), unless ``--new_run true`` asked for a new folder.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.files import layout
from lit_gpu.files.checkpoint import read_header
from lit_gpu.files.locate import escaping_links, refuse_links_out_of
from lit_gpu.files.run_config import CONFIG_N_RE, Signature, run_signature, saved_configs
from lit_gpu.files.text import METRICS_FIX, csv_header, read_csv
from lit_gpu.io import atomic_file
from lit_gpu.messages import shown
from lit_gpu.upstream.loops import batches_that_stepped

DEFAULT_ROOT = "runs"
DEFAULT_NAME = layout.NAME
LOGGER_KINDS = ("csv", "tensorboard")
CONFIG_NAME = "config.yaml"
METRICS_NAME = "metrics.csv"

# what a run leaves behind before its first logged metric or checkpoint
_STARTUP_FILES = re.compile(r"^(config\.yaml|hparams\.yaml|events\.out\.tfevents\..*|\.lit_gpu\.lock)$")


# ---- claiming a folder ----------------------------------------------------------------------------
def version_number(path: str | os.PathLike) -> int | None:
    """``N`` of a ``version_N`` folder name lit_gpu could have made, else ``None``."""
    return layout.version_number(path)


def list_versions(parent: str | os.PathLike) -> list[Path]:
    """The ``version_N`` run folders in ``parent``, by ``N`` (links, files and odd names left out)."""
    return [run.path for run in layout.list_runs(parent)]


def claim_version(root: str | os.PathLike, name: str = DEFAULT_NAME) -> Path:
    """Create and return the next free ``root/name/version_N`` (no take-over; its lock let go).

    Two processes claiming at the same moment get two different folders (see
    :func:`lit_gpu.files.layout.claim_run`).
    """
    claim = layout.claim_run(root, name)
    claim.lock.release()
    return claim.folder


def remove_if_unused(folder: str | os.PathLike) -> bool:
    """Remove a run folder that holds only start-up files (no metrics, no checkpoint); True if removed.

    Start-up files are ``config.yaml``, ``hparams.yaml``, TensorBoard event files, the run's lock and
    empty folders; anything else (``metrics.csv``, a checkpoint, a user's file) keeps the folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return False
    for path in folder.rglob("*"):
        if path.is_file() and not _STARTUP_FILES.match(path.name):
            return False
    shutil.rmtree(folder, ignore_errors=True)
    return not folder.exists()


# ---- continuing a run in its folder ------------------------------------------------------------------
def run_folder_of(ckpt_path: str | os.PathLike) -> Path | None:
    """The run folder of a checkpoint at ``.../version_N/checkpoints/X.ckpt``, from where the file is.

    Paths stored inside the checkpoint or its ``config.yaml`` (another machine's) are not used.
    """
    if not Path(ckpt_path).is_file():
        return None
    run = layout.run_of_checkpoint(ckpt_path)
    return None if run is None else run.path


def resume_log_step(checkpoint: Mapping[str, Any]) -> int | None:
    """The first step a fit resumed from ``checkpoint`` logs metrics at; ``None`` if it cannot tell.

    Lightning logs at ``_batches_that_stepped`` (batches with an optimizer step; the checkpoint holds
    it), plus one when the save happened at a training batch end (before the counter moved).
    Checkpoints without loop state fall back to ``global_step``.
    """
    with contextlib.suppress(KeyError, TypeError):
        loop = checkpoint["loops"]["fit_loop"]
        stepped = batches_that_stepped(loop)
        total = loop["epoch_loop.batch_progress"]["total"]
        at_batch_end = total["ready"] == total["started"] == total["processed"] == total["completed"] + 1
        return stepped + int(at_batch_end)
    step = checkpoint.get("global_step") if isinstance(checkpoint, Mapping) else None
    return int(step) if isinstance(step, int) else None


@dataclass(frozen=True)
class Continuation:
    """A fit resumed from a checkpoint of ``folder`` logs there again, from ``step`` on."""

    folder: Path
    step: int


NOT_YOUR_RUN = "the run {folder} of {ckpt} is owned by {owner}, not by you: {what} goes to a folder of yours"
RUN_BEING_WRITTEN = (
    "not continuing the run in {folder}: another process is writing it; wait for it to end, "
    "or pass --new_run true to log into a new folder"
)


def _header(ckpt_path: str | os.PathLike, header: Any) -> Any:
    if header is not None:
        return header
    try:
        return read_header(ckpt_path)
    except LitGpuError:  # the run's own load reports a bad file properly
        return None


#: ``run=`` not given: :func:`continuation` and :func:`evaluation` find the checkpoint's run folder themselves
#: (Python callers); the CLI hands on the one its ``--ckpt_path`` resolution found
FIND = object()


def _run_of(ckpt_path: str | os.PathLike, run: Any) -> layout.RunDir | None:
    return layout.run_of_checkpoint(ckpt_path) if run is FIND else run


def continuation(
    ckpt_path: str | os.PathLike | None, header: Any = None, run: Any = FIND
) -> Continuation | None:
    """How a fit resumed from ``ckpt_path`` continues its run folder, or ``None`` (a new folder).

    Only a checkpoint inside one of *your* run folders (``version_N/checkpoints/``) continues it (another
    user's run in a shared root is never written to: one line says so). The step comes from
    ``header`` (the checkpoint's header, read once by the ``--ckpt_path`` resolution; read here when
    not given; tensors are not loaded).
    """
    run = _run_of(ckpt_path, run) if ckpt_path and Path(ckpt_path).is_file() else None
    if run is None:
        return None
    if not run.mine:
        owner = layout.owner_name(run.owner)
        messages.tell(
            NOT_YOUR_RUN.format(
                folder=shown(run.path), ckpt=shown(Path(ckpt_path).name), owner=owner, what="this fit"
            )
        )
        return None
    refuse_links_out_of(run.path)  # hparams.yaml, metrics.csv, config.N.yaml... are written there
    header = _header(ckpt_path, header)
    step = resume_log_step(header) if isinstance(header, Mapping) else None
    return None if step is None else Continuation(run.path, step)


@dataclass(frozen=True)
class Evaluation:
    """A ``validate``/``test``/``predict`` run: its ``command``, the run it evaluates, the step it logs at.

    ``run`` is the run folder of the checkpoint evaluated (``None``: not one of your runs; the
    evaluation then goes to ``ROOT/lit_gpu/evaluations/``); ``step`` is where its metrics are logged:
    the step of the checkpoint's last training batch on the run's curves (its global step - 1, as the
    training rows are logged), where ``lit-gpu plot`` marks them.
    """

    command: str
    run: Path | None = None
    step: int | None = None


def evaluation(
    command: str, ckpt_path: str | os.PathLike | None, header: Any = None, run: Any = FIND
) -> Evaluation:
    """Where the evaluation of ``ckpt_path`` writes: inside the checkpoint's run when it is yours."""
    if not ckpt_path or not Path(ckpt_path).is_file():
        return Evaluation(command)
    header = _header(ckpt_path, header)
    step = header.get("global_step") if isinstance(header, Mapping) else None
    # the training curves log a batch's metrics at its index: the checkpoint's last batch is step - 1
    step = max(step - 1, 0) if isinstance(step, int) and not isinstance(step, bool) else None
    run = _run_of(ckpt_path, run)
    if run is None:
        return Evaluation(command, None, step)
    if not run.mine:
        owner = layout.owner_name(run.owner)
        messages.tell(
            NOT_YOUR_RUN.format(
                folder=shown(run.path), ckpt=shown(Path(ckpt_path).name), owner=owner, what="this " + command
            )
        )
        return Evaluation(command, None, step)
    if escaping_links(run.path):  # evaluations/ would be written through a link: not in that run
        return Evaluation(command, None, step)
    return Evaluation(command, run.path, step)


def continue_run(run_dir: str | os.PathLike, step: int) -> int:
    """Prepare ``run_dir`` for a fit that logs again from ``step``: drop later ``metrics.csv`` rows.

    Rows with a step at or after ``step`` were written by an attempt that was stopped after the
    checkpoint was saved; the resumed fit logs those steps again. The file is rewritten atomically.
    TensorBoard events are purged by the writer (``purge_step``). Call on global rank 0 only.

    Returns:
        The number of rows dropped.
    """
    path = Path(run_dir) / METRICS_NAME
    if not path.is_file():
        return 0
    header, rows = read_csv(path, fix=METRICS_FIX)  # lit_gpu.files.text: budgeted, one-line errors
    kept = [row for row in rows if not _step_at_or_after(row.get("step"), step)]
    if len(kept) == len(rows):
        return 0
    with atomic_file(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(kept)
    return len(rows) - len(kept)


def _step_at_or_after(cell: str | None, step: int) -> bool:
    try:
        return float(cell or "") >= step
    except ValueError:
        return False


# how a run was started and where it lives, not what it trains
_IGNORED_CONFIG_KEYS = ("ckpt_path", "weights_only", "new_run", "free_gpus", "trainer.default_root_dir")


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: node}


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 3) -> list[str]:
    """What differs between two saved configs, as ``key: old -> new`` (at most ``limit``, then a count).

    Where a run lives and how it was started (``ckpt_path``, ``weights_only``, ``new_run``,
    ``free_gpus``, ``trainer.default_root_dir``) are not changes of the run.
    """
    before, after = _flatten(old), _flatten(new)
    keys = [
        k
        for k in dict.fromkeys([*before, *after])
        if before.get(k) != after.get(k) and not k.startswith(_IGNORED_CONFIG_KEYS)
    ]
    shown = [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys[:limit]]
    if len(keys) > limit:
        shown.append(f"and {len(keys) - limit} more")
    return shown


def next_config_path(folder: str | os.PathLike) -> Path:
    """``config.<n>.yaml`` with the next free ``n`` (from 1) in a run folder."""
    saved = saved_configs(folder)
    numbers = [int(m.group(1)) for p in saved if (m := CONFIG_N_RE.match(p.name))]
    return Path(folder) / f"config.{max(numbers, default=0) + 1}.yaml"


# ---- the default loggers -----------------------------------------------------------------------------
def _rank() -> int:
    return int(getattr(rank_zero_only, "rank", 0) or 0)


class RunFolder:
    """The folder lit_gpu's loggers share; claimed on first use, on global rank 0 only.

    The claim happens when a logger first needs its folder (Lightning creates the loggers'
    experiments on rank 0 when a run starts), so building a Trainer claims nothing, and other ranks
    never create folders: :class:`RunFolderSync` hands them rank 0's folder at setup.

    * a new run: :func:`lit_gpu.files.layout.claim_run` (with ``same_model``, the folder of a start of
      the same model that died before its first checkpoint is taken over); the run's lock is held
      until :meth:`release`;
    * ``continues``: a fit resumed from a checkpoint of one of your run folders uses that folder:
      rank 0 drops the ``metrics.csv`` rows logged after the checkpoint (:func:`continue_run`), and
      the TensorBoard logger purges those events;
    * ``evaluates``: a new ``evaluations/<command>_<k>`` in the evaluated run (or in
      ``ROOT/lit_gpu/evaluations/``), where metrics are logged at the checkpoint's step.

    Args:
        root: ``trainer.default_root_dir``.
        name: Folder between the root and the version folders.
        continues: The run folder to continue (:func:`continuation`); ``root`` and ``name`` then
            come from where that folder is.
        same_model: The model and data this run trains, to take over an abandoned start of it.
        evaluates: The evaluation this run is (:func:`evaluation`).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        name: str = DEFAULT_NAME,
        continues: Continuation | None = None,
        same_model: Signature | None = None,
        evaluates: Evaluation | None = None,
    ) -> None:
        if continues is not None:
            root, name = continues.folder.parent.parent, continues.folder.parent.name
        elif evaluates is not None:
            root = evaluates.run if evaluates.run is not None else Path(root) / name
            name = layout.EVALUATIONS
        self.root = str(root)
        self.name = name
        self.continues = continues
        self.same_model = same_model
        self.evaluates = evaluates
        self.claimed: Path | None = None  # the folder this process created
        self.lock: layout.RunLock | None = None
        self._version: str | None = None

    @property
    def fixed_step(self) -> int | None:
        """The step an evaluation's metrics are logged at (the checkpoint's), else ``None``."""
        return self.evaluates.step if self.evaluates is not None else None

    @property
    def version(self) -> str:
        """``version_N``; claims (or continues) the folder on rank 0 the first time it is asked for."""
        if self._version is None:
            rank = _rank()
            if rank != 0:
                return f"version_pending_rank{rank}"  # replaced by rank 0's at setup; never created
            if self.continues is not None:
                self._continue(self.continues)
            elif self.evaluates is not None:
                self.claimed = layout.claim_evaluation(self.root, self.evaluates.command)
                self._version = self.claimed.name
            else:
                claim = layout.claim_run(self.root, self.name, self._same_model_check())
                self.lock = claim.lock
                self.claimed = claim.folder  # a taken-over folder holds only start-up files again
                self._version = claim.folder.name
                if claim.taken_over:
                    messages.tell(TAKING_OVER.format(folder=shown(claim.folder)))
        return self._version

    def _continue(self, continues: Continuation) -> None:
        folder, step = continues.folder, continues.step
        layout.remove_dead_claims(folder.parent)  # a start killed while it claimed a folder
        self.lock = layout.RunLock.hold(folder)
        if self.lock is None:
            raise LitGpuError(RUN_BEING_WRITTEN.format(folder=shown(folder)))
        dropped = continue_run(folder, step)
        self._version = folder.name
        note = messages.CONTINUING_DROPPED.format(rows=dropped) if dropped else ""
        messages.tell(messages.CONTINUING_RUN.format(folder=shown(folder), step=step, dropped=note))

    def _same_model_check(self) -> Any:
        wanted = self.same_model
        if wanted is None or not wanted.model:
            return None

        def same(folder: Path) -> bool:
            saved = run_signature(folder)
            return saved is None or wanted.matches(saved)  # no config.yaml: killed before it was written

        return same

    @property
    def path(self) -> Path:
        """The run folder."""
        return Path(self.root) / self.name / self.version

    def adopt(self, version: str, root: str | None = None, name: str | None = None) -> None:
        """Use the folder another rank claimed (or continues)."""
        self._version = version
        self.root = self.root if root is None else root
        self.name = self.name if name is None else name

    def remove_if_unused(self) -> bool:
        """Remove the folder this process claimed if the run left nothing in it (a failed start)."""
        removed = self.claimed is not None and remove_if_unused(self.claimed)
        self.release()
        return removed

    def release(self) -> None:
        """The run ended here (done, stopped or failed): let go of its lock, removing the lock file."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


TAKING_OVER = "taking over {folder}: its start stopped before its first checkpoint"


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


class MetricsWriter:
    """``metrics.csv`` (and ``hparams.yaml``) of a run folder; appends to the file already there.

    What Lightning's CSV experiment writer does, except that an existing ``metrics.csv`` (a continued
    run's) is kept and appended to, with its columns; a new column rewrites the file atomically.

    Args:
        log_dir: The run folder.
    """

    NAME_METRICS_FILE = METRICS_NAME
    NAME_HPARAMS_FILE = "hparams.yaml"

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
