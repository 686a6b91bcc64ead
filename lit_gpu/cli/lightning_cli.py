"""LitGpuCLI: LightningCLI with lit_gpu's defaults, its parser, and the extra ``lit-gpu`` arguments.

Thin by design: it builds objects from configs and runs them; no training logic lives here.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
from jsonargparse import lazy_instance
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.interrupt import CheckpointOnInterrupt
from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.callbacks.oom_recovery import OOMRecovery
from lit_gpu.callbacks.prediction_writer import CSVPredictionWriter
from lit_gpu.callbacks.rng_state import RNGStateCallback
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.cli.ckpt_path import config_value, resolve_ckpt_path
from lit_gpu.cli.trainer import allow_auto_precision, as_argv, explain_device_error, resolve_trainer_config
from lit_gpu.errors import LitGpuError
from lit_gpu.io import install_atomic_checkpoint_io


# ---- parser ---------------------------------------------------------------------------------------
def concise_parse_error(message: str, prog: str) -> str:
    """One line from jsonargparse's multi-line error: the key, what was expected, what was given."""
    lines = [ln.strip().lstrip("- ").strip() for ln in message.splitlines() if ln.strip()]
    if not lines:
        return f"invalid arguments; run '{prog} --help' for the options"
    keep = [lines[0].rstrip(":")]
    expected = sorted({ln for ln in lines[1:] if ln.startswith("Expected")})
    if expected:
        keep.append(" or ".join(expected))
    keep.extend(ln for ln in lines[1:] if ln.startswith("Given value:"))
    if len(keep) == 1 and len(lines) > 1:
        keep.append(lines[-1])
    text = re.sub(r"<class '([\w.]+)'>", r"\1", "; ".join(keep))
    return text + f"; run '{prog} --help' for the options"


def _jsonargparse_debug() -> bool:
    # jsonargparse's documented switch for full tracebacks (its own reader is private)
    return os.getenv("JSONARGPARSE_DEBUG", "").lower() == "true"


class ConciseErrorParser(LightningArgumentParser):
    """Prints a bad config key or value as one ``lit-gpu: error:`` line (exit 2), not a usage wall."""

    @override
    def error(self, message: str, ex: Exception | None = None):  # type: ignore[override]
        if not self.exit_on_error or _jsonargparse_debug():
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        messages.tell_error(concise_parse_error(message, prog))
        sys.exit(2)


def add_extra_arguments(parser: LightningArgumentParser) -> None:
    """Add the ``nan_guard`` group, ``--predict_out``, ``--tune_batch_size`` and ``--oom_recovery``."""
    parser.add_lightning_class_args(NaNGuard, "nan_guard")
    parser.add_argument(
        "--predict_out",
        type=str | None,
        default="predictions.csv",
        help="predict only: CSV file for the predictions (index,prediction,probability for classifiers)",
    )
    parser.add_argument(
        "--tune_batch_size",
        type=bool,
        default=False,
        help="fit only: find the largest data.batch_size that fits in memory (Lightning's Tuner) first",
    )
    parser.add_argument(
        "--oom_recovery",
        type=bool,
        default=False,
        help="fit only: on out of memory, halve the micro-batch and retry the step (same effective batch)",
    )


# ---- around the trainer ---------------------------------------------------------------------------
def configure_trainer(trainer: pl.Trainer, config: Any, subcommand: str | None) -> None:
    """Atomic checkpoint IO, RNG state + interrupt checkpoint callbacks, and the predict writer."""
    install_atomic_checkpoint_io(trainer)
    trainer.callbacks.extend([RNGStateCallback(), CheckpointOnInterrupt()])
    if subcommand == "fit" and config_value(config, "fit.oom_recovery", False):
        trainer.callbacks.append(OOMRecovery())
    predict_out = config_value(config, f"{subcommand}.predict_out") if subcommand else None
    if subcommand == "predict" and predict_out:
        trainer.callbacks.append(CSVPredictionWriter(predict_out))


def maybe_tune_batch_size(
    trainer: pl.Trainer, model: pl.LightningModule, datamodule: Any, config: Any
) -> None:
    """Run Lightning's batch-size finder on ``datamodule.batch_size`` when ``--tune_batch_size true``."""
    if not config_value(config, "fit.tune_batch_size", False):
        return
    from lightning.pytorch.tuner import Tuner

    if datamodule is None or not hasattr(datamodule, "batch_size"):
        raise LitGpuError(messages.TUNE_NEEDS_BATCH_SIZE)
    found = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, mode="power")
    messages.tell(messages.BATCH_SIZE_FOUND.format(size=found))


# ---- the CLI ----------------------------------------------------------------------------------------
class LitGpuCLI(LightningCLI):
    """LightningCLI with lit_gpu's defaults: seed 42, a CSV logger, and best/last checkpoints.

    The ``checkpoint`` group configures the :class:`FreshLastCheckpoint` (``--checkpoint.monitor val/acc
    --checkpoint.mode max``); model and data are chosen in YAML with ``class_path``.
    """

    def __init__(self, args: Sequence[str] | None = None, **kwargs) -> None:
        kwargs.setdefault("seed_everything_default", 42)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("parser_class", ConciseErrorParser)  # one-line config errors
        trainer_defaults = {"logger": lazy_instance(CSVLogger, save_dir="runs", name="lit_gpu")}
        trainer_defaults.update(kwargs.pop("trainer_defaults", None) or {})
        # the command line, so that a device error can name the flag or file that asked for a GPU
        self.argv = as_argv(sys.argv[1:] if args is None else args)
        super().__init__(
            model_class=None,
            datamodule_class=None,
            trainer_defaults=trainer_defaults,
            args=args,
            **kwargs,
        )

    @override
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        allow_auto_precision(parser)
        parser.add_lightning_class_args(FreshLastCheckpoint, "checkpoint")
        parser.add_lightning_class_args(SpeedLevers, "speed")  # --speed.channels_last, --speed.compile, ...
        add_extra_arguments(parser)  # --nan_guard.*, --predict_out, --tune_batch_size, --oom_recovery
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/loss",
                "checkpoint.mode": "min",
                "checkpoint.save_last": True,
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": "best-epoch{epoch:02d}-step{step}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )

    @override
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        with warnings.catch_warnings():  # args from Python (main(argv), notebooks) are intended here
            warnings.filterwarnings("ignore", message=r".*LightningCLI's args parameter is intended to run.*")
            super().parse_arguments(parser, args)
        resolve_ckpt_path(self.config)  # "last" -> newest runs/*/version_*/checkpoints/last.ckpt

    @override
    def before_instantiate_classes(self) -> None:
        # trainer.devices "free:N" -> the N GPUs with most free memory; precision "auto" -> a real one
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        resolve_trainer_config(config.trainer)

    @override
    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except MisconfigurationException as err:  # no GPU / too few: say which setting asked for it
            message = explain_device_error(err, self.argv)
            if message is None:
                raise
            raise LitGpuError(message) from err
        configure_trainer(trainer, self.config, self.subcommand)  # atomic IO, RNG, Ctrl+C, CSV
        return trainer

    def before_fit(self) -> None:
        maybe_tune_batch_size(self.trainer, self.model, self.datamodule, self.config)
