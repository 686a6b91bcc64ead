"""A resumed fit's optimizer and scheduler states, checked against the ones the config built, before restore.

Lightning builds the optimizers and schedulers (``strategy.setup``) after it read the checkpoint and
before it restores them (``restore_training_state``); ``on_fit_start`` runs in between. There, the
checkpoint's states are compared with what ``configure_optimizers`` built
(:func:`lit_gpu.files.optimizer_fit.check_optimizers`: one line on a difference), or, with
``--fresh_optimizer``, replaced by the built ones' own states (a no-op restore: the optimizers and
schedulers start as the config builds them; the weights and the loops' progress are the checkpoint's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import lightning.pytorch as pl
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.files.contracts import ContractError
from lit_gpu.files.optimizer_fit import check_optimizers, watch

__all__ = ["OptimizerFit", "check_at_fit_start", "fit_optimizers"]


def fit_optimizers(trainer: pl.Trainer, checkpoint: dict[str, Any], what: str, fresh: bool) -> None:
    """Check ``checkpoint``'s optimizer and scheduler states against ``trainer``'s (``fresh``: replace)."""
    optimizers = list(trainer.optimizers)
    schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
    if fresh:
        checkpoint["optimizer_states"] = [optimizer.state_dict() for optimizer in optimizers]
        checkpoint["lr_schedulers"] = [scheduler.state_dict() for scheduler in schedulers]
        names = [type(x).__name__ for x in optimizers], [type(x).__name__ for x in schedulers]
        messages.tell(
            messages.OPTIMIZER_FRESH.format(
                what=what,
                optimizers=", ".join(names[0]) or "no optimizer",
                schedulers=", ".join(names[1]) or "no scheduler",
            )
        )
        return
    callbacks = getattr(trainer, "callbacks", [])
    averaging = any(isinstance(cb, pl.callbacks.StochasticWeightAveraging) for cb in callbacks)
    # SWA replaces the schedulers by its SWALR once averaging started and restores that one itself
    check_optimizers(checkpoint, optimizers, [] if averaging else schedulers, what)
    for each in (*optimizers, *schedulers):
        watch(each, what)  # Lightning's restore and the first step after it: their exception is one line


class OptimizerFit(pl.Callback):
    """Runs :func:`fit_optimizers` once, at the start of the fit that loaded ``checkpoint``."""

    def __init__(self) -> None:
        self._pending: tuple[dict[str, Any], str, bool] | None = None

    def arm(self, checkpoint: dict[str, Any], what: str, fresh: bool) -> None:
        self._pending = (checkpoint, what, fresh)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pending, self._pending = self._pending, None  # the checkpoint is not held past the check
        if pending is not None:
            fit_optimizers(trainer, *pending)


def check_at_fit_start(trainer: pl.Trainer, checkpoint: Any, what: str) -> None:
    """Check ``checkpoint`` (just read for ``trainer``'s fit) once the optimizers are built: now where the
    strategy restores after its set-up, else at ``on_fit_start``. Nothing for validate, test and predict:
    Lightning restores optimizers for a fit only."""
    if trainer.state.fn != "fit" or not isinstance(checkpoint, Mapping):
        return
    fresh = getattr(trainer.strategy.checkpoint_io, "fresh_optimizer", False) is True
    if not ("optimizer_states" in checkpoint and "lr_schedulers" in checkpoint):
        # a weights-only checkpoint (ModelCheckpoint(save_weights_only=True)): Lightning's restore ends in
        # a KeyError ("checkpoint contains only the model"); with --fresh_optimizer the built states fill in
        if not fresh:
            raise ContractError(messages.OPTIMIZER_STATE_MISSING.format(what=what))
        checkpoint = cast("dict[str, Any]", checkpoint)
    if trainer.strategy.restore_checkpoint_after_setup:
        fit_optimizers(trainer, checkpoint, what, fresh)  # type: ignore[arg-type]
        return
    hook = next((cb for cb in trainer.callbacks if isinstance(cb, OptimizerFit)), None)
    if hook is None:
        hook = OptimizerFit()
        trainer.callbacks.append(hook)
    hook.arm(checkpoint, what, fresh)  # type: ignore[arg-type]
