"""When the fast path leaves a fit to Lightning: the cases the lean step and the lean batch do not cover.

Each blocker names the first case it finds in one short phrase (told by the callbacks), or None; the
release checks are the gate's (:mod:`lit_gpu.upstream.gate`).
"""

from __future__ import annotations

import lightning.pytorch as pl

from lit_gpu.upstream.hooks import replaced_on_instance

# ---- the automatic-optimization step without Lightning's dispatch layers ---------------------------
#: LightningModule methods whose override would make the lean step differ from Lightning's: then it
#: stands aside (``optimizer_step`` receives Lightning's closure and optimizer wrapper)
_MODULE_METHODS = ("optimizer_step", "configure_gradient_clipping", "clip_gradients")


def lean_step_blocker(trainer: pl.Trainer, pl_module: pl.LightningModule) -> str | None:
    """Why :class:`LeanOptimizerStep` must leave this fit to Lightning's own step, or None if it need not.

    The lean step covers one device (``SingleDeviceStrategy``), fp32 or autocast without a grad
    scaler (``32-true``, ``bf16-mixed``), automatic optimization with one optimizer, no gradient
    clipping, no profiler, and a module that keeps Lightning's ``optimizer_step`` and
    ``configure_gradient_clipping``. Gradient accumulation is checked at every step.
    """
    from lightning.pytorch.core.optimizer import do_nothing_closure
    from lightning.pytorch.plugins.precision import MixedPrecision, Precision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    strategy, precision = trainer.strategy, trainer.precision_plugin
    if type(strategy) is not SingleDeviceStrategy or trainer.world_size != 1:  # a world size set by hand too
        return f"strategy {type(strategy).__name__} with world size {trainer.world_size}"
    if type(precision) not in (Precision, MixedPrecision) or getattr(precision, "scaler", None) is not None:
        return f"precision plugin {type(precision).__name__}"
    if not isinstance(trainer.profiler, PassThroughProfiler):  # lit_gpu's NoProfiler is one too
        return f"profiler {type(trainer.profiler).__name__}"
    if not pl_module.automatic_optimization or len(trainer.optimizers) != 1:
        return "manual optimization or several optimizers"
    if trainer.gradient_clip_val:
        return "gradient clipping"
    for name in _MODULE_METHODS:
        if is_overridden(name, pl_module, pl.LightningModule) or replaced_on_instance(pl_module, name):
            return f"the module overrides {name}"
    wrappers = strategy._lightning_optimizers  # private (pinned)
    if len(wrappers) != 1 or any(
        getattr(wrappers[0], hook, None) is not do_nothing_closure
        for hook in ("_on_before_step", "_on_after_step")
    ):
        return "a wrapped optimizer step"
    return None


#: the data hooks between the loader and ``training_step`` (Lightning's defaults only move the batch)
TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def transfer_hooks_overridden(trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
    """Whether the module or data module overrides one of :data:`TRANSFER_HOOKS`.

    Where one does, the lean batch makes Lightning's own transfer calls (its defaults only move the batch).
    """
    from lightning.pytorch.utilities.model_helpers import is_overridden

    selector = trainer._data_connector._datahook_selector  # private (pinned)
    for hook in TRANSFER_HOOKS:
        owner = selector.get_instance(hook) if selector is not None else pl_module
        if is_overridden(hook, owner) or replaced_on_instance(owner, hook):
            return True
    return False


def lean_batch_blocker(trainer: pl.Trainer, pl_module: pl.LightningModule) -> str | None:
    """Why :class:`LeanTrainingBatch` must leave this fit to Lightning's loop, or None if it need not.

    It covers one device (``SingleDeviceStrategy``), no profiler, automatic optimization, a precision
    plugin that leaves inputs as they are, and the Lightning release whose loop it mirrors. Batch-transfer
    hooks a module or data module overrides (GPU augmentation in ``on_after_batch_transfer``) it calls as
    Lightning's loop does.
    """
    from lightning.fabric.plugins.precision.precision import Precision as FabricPrecision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy, Strategy

    strategy = trainer.strategy
    if type(strategy) is not SingleDeviceStrategy or (
        type(strategy).on_train_batch_start is not Strategy.on_train_batch_start
    ):
        return f"strategy {type(strategy).__name__}"
    if type(trainer.precision_plugin).convert_input is not FabricPrecision.convert_input:
        return f"precision plugin {type(trainer.precision_plugin).__name__} converts inputs"
    if not isinstance(trainer.profiler, PassThroughProfiler):  # lit_gpu's NoProfiler is one too
        return f"profiler {type(trainer.profiler).__name__}"
    if not pl_module.automatic_optimization:
        return "manual optimization"
    return None


__all__ = ["TRANSFER_HOOKS", "lean_batch_blocker", "lean_step_blocker", "transfer_hooks_overridden"]
