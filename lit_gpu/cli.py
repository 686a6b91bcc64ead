"""The ``lit-gpu`` command: LightningCLI for fit/validate/test/predict plus a few tool commands.

Thin by design: it builds objects from configs and runs them; no training logic lives here.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger
from jsonargparse import lazy_instance

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
        trainer_defaults = {"logger": lazy_instance(CSVLogger, save_dir="runs", name="lit_gpu")}
        trainer_defaults.update(kwargs.pop("trainer_defaults", None) or {})
        super().__init__(
            model_class=None,
            datamodule_class=None,
            trainer_defaults=trainer_defaults,
            args=args,
            **kwargs,
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
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
    except Exception as err:
        message = explain(err)
        if message is None:
            raise
        print(f"lit-gpu: error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
