"""Settings Lightning would refuse deep inside a run, refused in one line before it starts."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lit_gpu.cli.ckpt_path import config_value
from lit_gpu.errors import LitGpuError

__all__ = ["BAD_SEED", "NO_PREDICT_STEP", "check_predictable", "check_seed"]

BAD_SEED = (
    "seed_everything: {seed!r} is out of range, the seed must be an integer from 0 to 4294967295 "
    "(or true for a random one, false for none); set --seed_everything (or seed_everything: in your config)"
)


def check_seed(config: Any) -> None:
    """Refuse a ``seed_everything`` Lightning's ``seed_everything`` would raise a ValueError for."""
    sub = config_value(config, "subcommand")
    seed = config_value(config, f"{sub}.seed_everything" if sub else "seed_everything")
    if seed is None or isinstance(seed, bool):
        return
    if not isinstance(seed, int) or not 0 <= seed <= 2**32 - 1:
        raise LitGpuError(BAD_SEED.format(seed=seed))


NO_PREDICT_STEP = (
    "model.class_path {class_path}: the model has no predict_step (nor forward), so lit-gpu predict cannot "
    "run it; define predict_step(self, batch, batch_idx) in it, or use a lit_gpu module "
    "(e.g. lit_gpu.modules.ClassificationModule)"
)


def check_predictable(model: pl.LightningModule, config: Any) -> None:
    """Refuse ``lit-gpu predict`` on a model Lightning cannot predict with, in one line naming its class.

    Lightning's own check (``predict_step`` is None, or neither ``predict_step`` nor ``forward``
    overridden) raises deep inside ``Trainer.predict``; this one runs before it, where the config is known.
    """
    from lightning.pytorch.utilities.model_helpers import is_overridden

    step = getattr(model, "predict_step", None)
    if step is not None and (is_overridden("predict_step", model) or is_overridden("forward", model)):
        return
    class_path = config_value(config, "predict.model.class_path", None)
    if not isinstance(class_path, str):
        class_path = f"{type(model).__module__}.{type(model).__qualname__}"
    raise LitGpuError(NO_PREDICT_STEP.format(class_path=class_path))
