"""What a module lacks for an evaluation command: one line, before Lightning's error deep in the Trainer."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lit_gpu.errors import LitGpuError
from lit_gpu.run.layout import config_value

NO_STEP = (
    "model.class_path {class_path}: the model has no {step}{extra}, so lit-gpu {command} cannot run it; "
    "define {step}(self, batch, batch_idx) in it, or use a lit_gpu module "
    "(e.g. lit_gpu.modules.ClassificationModule)"
)
# the step each evaluation command needs; predict also runs a module with forward only (as Lightning does)
STEPS = {"validate": "validation_step", "test": "test_step", "predict": "predict_step"}


def check_has_step(model: pl.LightningModule, config: Any, command: str) -> None:
    """Refuse ``lit-gpu validate/test/predict`` of a model without the step it needs: one line naming it.

    Lightning's own checks (``validation_step``/``test_step`` not overridden; ``predict_step`` None, or
    neither ``predict_step`` nor ``forward`` overridden) raise deep inside the Trainer; this one runs
    before it, where the config is known.
    """
    from lightning.pytorch.utilities.model_helpers import is_overridden

    step = STEPS[command]
    if getattr(model, step, None) is not None and (
        is_overridden(step, model) or (command == "predict" and is_overridden("forward", model))
    ):
        return
    class_path = config_value(config, f"{command}.model.class_path", None)
    if not isinstance(class_path, str):
        class_path = f"{type(model).__module__}.{type(model).__qualname__}"
    extra = " (nor forward)" if command == "predict" else ""
    raise LitGpuError(NO_STEP.format(class_path=class_path, step=step, extra=extra, command=command))


# Lightning's own Trainer methods, as imported (a test or a user replacing one runs its own checks)
_TRAINER_METHODS = {name: getattr(pl.Trainer, name) for name in ("fit", "validate", "test", "predict")}


def runs_lightnings(cli: Any, command: str) -> bool:
    """Whether ``command`` runs Lightning's own ``Trainer`` method, whose errors lit_gpu's checks foretell.

    LightningCLI runs the CLI's own method of that name where it defines one, and a ``trainer_class`` may
    override it: those decide for themselves what data they need.
    """
    if getattr(type(cli), command, None) is not None:
        return False
    return getattr(type(cli.trainer), command, None) is _TRAINER_METHODS.get(command)
