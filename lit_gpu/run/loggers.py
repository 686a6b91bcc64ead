"""lit_gpu's loggers: CSV and TensorBoard, both writing into the one folder of a run, and their CLI wiring.

``ROOT`` is ``trainer.default_root_dir`` (``runs`` by default); the run folder they share, its claim,
continuation and evaluations are :class:`lit_gpu.run.folder.RunFolder`'s. Here:

* :func:`make_loggers`: lit_gpu's loggers (``--loggers csv tensorboard``) over one :class:`RunFolder`;
  :func:`trainer_loggers`: the CLI's call (``--loggers``, ``--new_run``: :func:`add_arguments`);
* :class:`MetricsWriter`: ``metrics.csv`` appended to (a continued run keeps its rows); as the CSV logger's
  ``experiment`` it answers TensorBoard ``SummaryWriter``'s calls (:class:`MediaWriter`: scalars as rows,
  the rest ignored with one line: TensorBoard's logger keeps them where it runs, else they are dropped),
  so a module looping over ``self.loggers`` calling ``experiment.add_image`` (Lightning's GAN example) runs;
* :class:`RunFolderSync`: every rank adopts rank 0's folder at setup (a default callback; old
  ``config.yaml`` files name it ``lit_gpu.runs.RunFolderSync``, new ones ``lit_gpu.callbacks.RunFolderSync``);
* :class:`RecordModelSpec`: the CLI's model spec in every checkpoint, for ``lit-gpu export`` of any module.
"""

from __future__ import annotations

import csv
import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

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
from lit_gpu.checkpoints.build import MODEL_SPEC_KEY, NET_SPEC_KEY, plain_spec
from lit_gpu.checkpoints.io import atomic_file
from lit_gpu.messages import shown, tell
from lit_gpu.run import layout
from lit_gpu.run.folder import RunFolder, args_with_saved_config, of_command
from lit_gpu.run.layout import HPARAMS_NAME, METRICS_NAME, config_value
from lit_gpu.run.store import Resolution, built_classes
from lit_gpu.textfiles import METRICS_FIX, csv_header, read_csv

if TYPE_CHECKING:
    from lightning.pytorch.cli import LightningArgumentParser

# ---- what a module sends to a logger's experiment (SummaryWriter calls) -----------------------------------
LOGGER_CALL_IGNORED = (
    "the CSV logger keeps no {method} (tag '{tag}') and ignores it (said once); the TensorBoard logger's "
    "event files keep it: tensorboard --logdir {folder}"
)
LOGGER_CALL_DROPPED = (
    "the CSV logger keeps no {method} (tag '{tag}'): dropped (said once); no TensorBoard logger runs to keep "
    "it: add it with --loggers [csv,tensorboard]"
)


@functools.cache
def summary_writer_methods() -> frozenset[str]:
    """The public methods of TensorBoard's ``SummaryWriter`` (imported when first needed)."""
    from torch.utils.tensorboard import SummaryWriter

    names = (n for n in dir(SummaryWriter) if not n.startswith("_"))
    return frozenset(n for n in names if callable(getattr(SummaryWriter, n)))


class MediaWriter:
    """Mixin for the CSV logger's experiment: the whole surface of TensorBoard's ``SummaryWriter`` (read from
    the class), so that a module writing to every logger's ``experiment`` runs. Scalars are rows of
    ``metrics.csv``; images, figures, text, histograms and the rest are TensorBoard's (its logger is on by
    default): ignored here, with one line per method and run, which says whether a TensorBoard logger runs
    beside (``beside_tensorboard``) to keep them or they are dropped."""

    log_dir: str
    beside_tensorboard: bool = False
    log_metrics: Callable[..., None]
    save: Callable[[], None]

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, *args: Any,
                   **kwargs: Any) -> None:  # fmt: skip
        """A row of ``metrics.csv``: ``tag`` at ``global_step``."""
        self.log_metrics({tag: _number(scalar_value)}, global_step)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: int | None = None,
                    *args: Any, **kwargs: Any) -> None:  # fmt: skip
        """A row of ``metrics.csv`` with ``main_tag/key`` columns."""
        self.log_metrics({f"{main_tag}/{k}": _number(v) for k, v in tag_scalar_dict.items()}, global_step)

    def flush(self) -> None:
        """Write the rows recorded so far."""
        self.save()

    def close(self) -> None:
        """Write the rows recorded so far (the writer stays usable, as Lightning's logger expects)."""
        self.save()

    def get_logdir(self) -> str:
        """The run folder."""
        return self.log_dir

    def __getattr__(self, name: str) -> Any:
        """The rest of ``SummaryWriter``'s methods: ignored, one line per method and writer (run)."""
        if name.startswith("_") or name not in summary_writer_methods():
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        said: set[str] = vars(self).setdefault("ignored_methods", set())

        def ignored(*args: Any, **kwargs: Any) -> None:
            if name not in said:
                said.add(name)
                tag = args[0] if args and isinstance(args[0], str) else kwargs.get("tag", "")
                line = LOGGER_CALL_IGNORED if self.beside_tensorboard else LOGGER_CALL_DROPPED
                tell(line.format(method=name, tag=shown(tag), folder=self.log_dir))

        return ignored


def _number(value: Any) -> Any:
    """A tensor or NumPy scalar as a Python number (what ``metrics.csv`` holds)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


REBUILDING_FROM = "rebuilding the run from {config}: took {taken}; nothing else is read from it{left_out}"
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
        loggers.append(RunCSVLogger(run, beside_tensorboard="tensorboard" in kinds))
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
    (``add_image`` & co, :class:`MediaWriter`): a module that writes to every logger runs.

    Args:
        log_dir: The run folder.
        beside_tensorboard: Whether a TensorBoard logger writes the same run (keeps what this one ignores).
    """

    NAME_METRICS_FILE = METRICS_NAME
    NAME_HPARAMS_FILE = HPARAMS_NAME

    def __init__(self, log_dir: str, beside_tensorboard: bool = False) -> None:
        self.log_dir = log_dir
        self.beside_tensorboard = beside_tensorboard
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

    def __init__(self, run: RunFolder, beside_tensorboard: bool = False, **kwargs: Any) -> None:
        self.run = run
        self.beside_tensorboard = beside_tensorboard  # said when a module's media call is ignored
        self._writer: MetricsWriter | None = None
        super().__init__(save_dir=run.root, name=run.name, **kwargs)

    @property
    @override
    @rank_zero_experiment
    def experiment(self) -> MetricsWriter:
        if self._writer is None:
            self._writer = MetricsWriter(self.log_dir, self.beside_tensorboard)
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


# ---- the CLI wiring: --loggers, --new_run, the rebuild from a checkpoint, the model spec ----
TRAINER_DEFAULTS = {"default_root_dir": layout.DEFAULT_ROOT}


def add_arguments(parser: LightningArgumentParser) -> None:
    """Add ``--loggers``."""
    parser.add_argument(
        "--loggers",
        type=list[Literal["csv", "tensorboard"]],
        default=list(LOGGER_KINDS),
        help="lit_gpu's loggers, all into DEFAULT_ROOT_DIR/lit_gpu/version_N (csv: metrics.csv for "
        "lit-gpu plot; tensorboard: tensorboard --logdir DEFAULT_ROOT_DIR); used when trainer.logger "
        "is null or true",
    )
    parser.add_argument(
        "--new_run",
        type=bool,
        default=False,
        help="fit --ckpt_path: log into a new version_N folder; by default a fit resumed from a checkpoint "
        "of a run folder continues that folder (metrics.csv, TensorBoard events, checkpoints)",
    )


def trainer_loggers(
    config: Any,
    subcommand: str | None = None,
    resolution: Resolution | None = None,
    parsed: Any = None,
    classes: Mapping[str, str] | None = None,
) -> tuple[list[Any] | None, RunFolder | None]:
    """lit_gpu's loggers for this run and their shared folder, or ``(None, None)`` for the user's own.

    ``trainer.logger`` null/true means lit_gpu's ``--loggers`` (an empty list: no logger). A fit
    resumed from a checkpoint inside one of your run folders continues that folder unless
    ``--new_run true``; a new fit may take over the folder of a start of the same model that died
    before its first checkpoint; ``validate``/``test``/``predict`` write into a new
    ``evaluations/<command>_<k>`` of the evaluated checkpoint's run. ``resolution`` hands on the
    checkpoint's header, read once by the ``--ckpt_path`` resolution; ``parsed`` is the sub-command's
    parsed config (plain ``class_path`` entries: which model and data this run trains), ``config`` if
    not given.
    """
    logger = config_value(config, "trainer.logger")
    if logger is not None and logger is not True:
        return None, None
    kinds = list(config_value(config, "loggers", LOGGER_KINDS))
    if not kinds:
        return [], None
    ckpt_path = config_value(config, "ckpt_path")
    if resolution is None or resolution.path != ckpt_path:  # not resolved here (a special value, a URL)
        resolution = None
    folder = of_command(subcommand, config, resolution, parsed, classes)  # the resolution handed on: one call
    return make_loggers(kinds, folder), folder


def with_saved_config(args: Any, cli_kwargs: Mapping[str, Any] | None = None) -> Any:
    """``args`` with the ``config.yaml`` beside ``--ckpt_path FILE`` put first (when no config is given).

    ``cli_kwargs``: the CLI's arguments (``model_class=``...), whose fixed classes take init args only.
    """
    if args is not None and not isinstance(args, list | tuple):
        return args
    argv = list(sys.argv[1:] if args is None else args)
    modes = {"subclass_mode_model": False, "subclass_mode_data": False}  # LightningCLI's defaults
    fixed = built_classes(SimpleNamespace(**{**modes, **(cli_kwargs or {})}))
    new, used = args_with_saved_config(argv, fixed=fixed)
    if used is None:
        return args
    left_out = f" (left out: {', '.join(used.left_out[:6])}; pass them as flags)" if used.left_out else ""
    messages.tell(REBUILDING_FROM.format(config=used.source, taken=used.describe(), left_out=left_out))
    return new


class RecordModelSpec(pl.Callback):
    """Writes the CLI config's model spec (and its ``net``) into every checkpoint, for export of any module.

    The spec is the config LightningCLI built the model from (plain data), not the module's internals,
    so a researcher's own LightningModule (or Lightning's ``BoringModel``) can be exported too.
    """

    def __init__(self, model_config: Any, classes: Mapping[str, str] | None = None) -> None:
        fixed = (classes or {}).get("model")  # a model_class= CLI: the config holds init args only
        if fixed is not None and plain_spec(model_config) is None:
            args = model_config.as_dict() if hasattr(model_config, "as_dict") else model_config
            model_config = {"class_path": fixed, "init_args": args if isinstance(args, Mapping) else {}}
        self.model_spec = plain_spec(model_config)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.model_spec is None:
            return
        checkpoint[MODEL_SPEC_KEY] = self.model_spec
        net = (self.model_spec.get("init_args") or {}).get("net")
        if isinstance(net, dict) and isinstance(net.get("class_path"), str):
            checkpoint[NET_SPEC_KEY] = plain_spec(net)
