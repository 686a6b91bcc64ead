"""The ``lit-gpu`` command: LightningCLI for fit/validate/test/predict plus a few tool commands.

Thin by design: it builds objects from configs and runs them; no training logic lives here.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from jsonargparse import lazy_instance
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger

from lit_gpu import devices as _devices
from lit_gpu import diagnostics
from lit_gpu.callbacks import cli_support
from lit_gpu.callbacks.checkpoint import ModelCheckpoint
from lit_gpu.callbacks.interrupt import INTERRUPT_EXIT_CODE, was_interrupted
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.commands import TOOL_COMMANDS
from lit_gpu.errors import explain


class LitGpuCLI(LightningCLI):
    """LightningCLI with lit_gpu's defaults: seed 42, a CSV logger, and best/last checkpoints.

    The ``checkpoint`` group configures the ModelCheckpoint (``--checkpoint.monitor val/acc
    --checkpoint.mode max``); model and data are chosen in YAML with ``class_path``.
    """

    def __init__(self, args: Sequence[str] | None = None, **kwargs) -> None:
        kwargs.setdefault("seed_everything_default", 42)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("auto_configure_optimizers", False)
        kwargs.setdefault("parser_class", cli_support.ConciseErrorParser)  # one-line config errors
        trainer_defaults = {"logger": lazy_instance(CSVLogger, save_dir="runs", name="lit_gpu")}
        trainer_defaults.update(kwargs.pop("trainer_defaults", None) or {})
        diagnostics.record_argv(sys.argv[1:] if args is None else args)
        super().__init__(
            model_class=None,
            datamodule_class=None,
            trainer_defaults=trainer_defaults,
            args=args,
            **kwargs,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        _devices.allow_auto_precision(parser)
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(SpeedLevers, "speed")  # --speed.channels_last, --speed.compile, ...
        cli_support.add_arguments(parser)  # --nan_guard.*, --predict_out, --tune_batch_size
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

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        super().parse_arguments(parser, args)
        cli_support.resolve_ckpt_path(self.config)  # "last" -> newest runs/*/version_*/checkpoints/last.ckpt

    def instantiate_trainer(self, **kwargs):
        trainer = super().instantiate_trainer(**kwargs)
        cli_support.configure_trainer(trainer, self.config, self.subcommand)  # atomic IO, RNG, Ctrl+C, CSV
        return trainer

    def before_fit(self) -> None:
        cli_support.maybe_tune_batch_size(self.trainer, self.model, self.datamodule, self.config)

    def before_instantiate_classes(self) -> None:
        # trainer.devices "free:N" -> the N GPUs with most free memory; precision "auto" -> a real one
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        _devices.resolve_trainer_config(config.trainer)


def _run_tool(name: str, argv: list[str]) -> int:
    module_path, func = TOOL_COMMANDS[name].split(":")
    return int(getattr(importlib.import_module(module_path), func)(argv) or 0)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``lit-gpu`` and ``python -m lit_gpu``."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in TOOL_COMMANDS:
            sys.exit(_run_tool(args[0], args[1:]))
        LitGpuCLI(args=None if argv is None else args)
    except BrokenPipeError:  # `lit-gpu env --json | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except SystemExit:
        if was_interrupted():  # Ctrl+C / SIGINT during fit: last.ckpt saved, documented exit 130
            sys.exit(INTERRUPT_EXIT_CODE)
        raise
    except Exception as err:
        message = explain(err)
        if message is None:
            raise
        print(f"lit-gpu: error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
