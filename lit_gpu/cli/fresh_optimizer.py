"""``--fresh_optimizer``: resume the weights and the progress, start the optimizers and schedulers fresh.

For a resume whose config changed the optimizer (SGD -> Adam), its param groups or the schedule
(``OneCycleLR`` ``total_steps`` 8 -> 16): the checkpoint's optimizer and scheduler states no longer fit
(:mod:`lit_gpu.checkpoints.optimizer` says so in one line); with this flag they are replaced by the states
of the ones the config built (:mod:`lit_gpu.checkpoints.optimizer`). ``docs/checkpoints.md``.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lit_gpu.run.layout import config_value

FLAG = "fresh_optimizer"


def add_argument(parser: Any) -> None:
    """Add ``--fresh_optimizer`` (fit only; off by default)."""
    parser.add_argument(
        f"--{FLAG}",
        type=bool,
        default=False,
        help="fit only, with --ckpt_path: keep the checkpoint's weights and progress, start the optimizers "
        "and learning-rate schedulers fresh as the config builds them (after changing them)",
    )


def apply(trainer: pl.Trainer, config: Any, subcommand: str | None) -> None:
    """Tell ``trainer``'s checkpoint reader that the user asked for fresh optimizers (``fit`` only)."""
    if subcommand == "fit" and config_value(config, f"fit.{FLAG}", False):
        trainer.strategy.checkpoint_io.fresh_optimizer = True  # read by checkpoints.optimizer
