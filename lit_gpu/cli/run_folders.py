"""Where ``lit-gpu`` runs write: lit_gpu's loggers under ``trainer.default_root_dir``, one folder per run.

* ``--trainer.default_root_dir DIR`` (default ``runs``) holds everything: ``DIR/lit_gpu/version_N/``
  with ``config.yaml``, ``metrics.csv`` (CSV), TensorBoard events and ``checkpoints/``; ``--loggers``
  picks lit_gpu's loggers (``[csv, tensorboard]``; TensorBoard's first, as in Lightning) unless
  ``trainer.logger`` names other ones.
* ``SUBCOMMAND --ckpt_path FILE`` without ``--config``: the run is rebuilt from the model and data of
  its run's ``config.yaml`` (:func:`lit_gpu.run.rebuild.args_with_saved_config`), nothing else.
* :class:`RecordModelSpec` writes the CLI's model (and net) spec into every checkpoint, for
  ``lit-gpu export`` of any LightningModule.
* ``fit --ckpt_path last|FILE`` continues the checkpoint's run folder (``--new_run true``: a new one);
  ``validate``/``test``/``predict`` of a run's checkpoint write into ``evaluations/<command>_<k>/`` of
  that run (:mod:`lit_gpu.run.folder`).
* The progress bar redraws a few times a second (:mod:`lit_gpu.callbacks.progress`), not 100.
* The default checkpoint monitor ``val/loss`` falls back to ``last.ckpt`` only for a module that
  never logs it.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import lightning.pytorch as pl
from lightning.pytorch.cli import LightningArgumentParser
from typing_extensions import override

from lit_gpu import loggers, messages
from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.progress import default_progress_bar
from lit_gpu.checkpoints.build import MODEL_SPEC_KEY, NET_SPEC_KEY, plain_spec
from lit_gpu.cli.ckpt_path import config_value
from lit_gpu.run import layout, rebuild
from lit_gpu.run.folder import RunFolder, of_command
from lit_gpu.run.store import Resolution

DEFAULT_MONITOR = "val/loss"
TRAINER_DEFAULTS = {"default_root_dir": layout.DEFAULT_ROOT}


def add_arguments(parser: LightningArgumentParser) -> None:
    """Add ``--loggers``."""
    parser.add_argument(
        "--loggers",
        type=list[Literal["csv", "tensorboard"]],
        default=list(loggers.LOGGER_KINDS),
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
    kinds = list(config_value(config, "loggers", loggers.LOGGER_KINDS))
    if not kinds:
        return [], None
    ckpt_path = config_value(config, "ckpt_path")
    if resolution is None or resolution.path != ckpt_path:  # not resolved here (a special value, a URL)
        resolution = None
    folder = of_command(subcommand, config, resolution, parsed)  # the resolution handed on: one call
    return loggers.make_loggers(kinds, folder), folder


def progress_bar_callbacks(config: Any) -> list[Any] | None:
    """``trainer.callbacks`` plus lit_gpu's progress bar, or ``None`` when the config needs none added.

    Nothing is added when the progress bar is off or the config already has one.
    """
    trainer = config_value(config, "trainer", {})
    if config_value(trainer, "enable_progress_bar", True) is False:
        return None
    callbacks = config_value(trainer, "callbacks", [])
    callbacks = list(callbacks) if isinstance(callbacks, list | tuple) else [callbacks]
    if any(isinstance(c, pl.callbacks.ProgressBar) for c in callbacks):
        return None
    return [*callbacks, default_progress_bar()]


def with_saved_config(args: Any) -> Any:
    """``args`` with the ``config.yaml`` beside ``--ckpt_path FILE`` put first (when no config is given)."""
    if args is not None and not isinstance(args, list | tuple):
        return args
    argv = list(sys.argv[1:] if args is None else args)
    new, used = rebuild.args_with_saved_config(argv)
    if used is None:
        return args
    left_out = f" (left out: {', '.join(used.left_out[:6])}; pass them as flags)" if used.left_out else ""
    messages.tell(
        messages.REBUILDING_FROM.format(config=used.source, taken=used.describe(), left_out=left_out)
    )
    return new


def adapt_checkpoint_monitor(trainer: pl.Trainer) -> None:
    """The default ``val/loss`` monitor falls back to ``last.ckpt`` only for modules that never log it."""
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, FreshLastCheckpoint) and callback.monitor == DEFAULT_MONITOR:
            callback.monitor_fallback = True


class RecordModelSpec(pl.Callback):
    """Writes the CLI config's model spec (and its ``net``) into every checkpoint, for export of any module.

    The spec is the config LightningCLI built the model from (plain data), not the module's internals,
    so a researcher's own LightningModule (or Lightning's ``BoringModel``) can be exported too.
    """

    def __init__(self, model_config: Any) -> None:
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
