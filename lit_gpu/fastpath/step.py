"""The automatic-optimization step without Lightning's dispatch layers (:class:`LeanOptimizerStep`).

Where nothing in a fit can tell (:func:`lean_step_blocker`), the optimizer step makes the calls Lightning's
``_AutomaticOptimization.run`` makes, in the same order, without its closure and wrapper objects; with
``--speed.cuda_graph`` it hands the step to the whole-step capture (:mod:`lit_gpu.fastpath.graph`).
The hook plumbing it shares with the lean batch (idle hooks hidden, fit patches, hook dispatch) is
:mod:`lit_gpu.fastpath.hooks`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.upstream import stands_aside

if TYPE_CHECKING:
    from lit_gpu.fastpath.graph import StepGraph

from lit_gpu.fastpath.hooks import (
    BATCH_HOOKS,
    MODULE_HOOKS,
    FitPatch,
    HookDispatch,
    SkipIdleHooks,
    fast_path_problem,
    hook_name_setter,
    idle_hooks,
    lean_step_blocker,
    replaced_on_instance,
)


class LeanOptimizerStep(FitPatch):
    """Runs Lightning's automatic-optimization step without its dispatch layers, where nothing can tell.

    Added by the ``lit-gpu`` CLI. Per training step Lightning builds a three-part closure and passes
    it through the module's ``optimizer_step``, the ``LightningOptimizer`` wrapper, the strategy and
    the precision plugin to ``optimizer.step``, and dispatches every step hook to every callback,
    inside profiler contexts; it also reads the signature of ``training_step`` again at every step
    (``_build_kwargs``). Where none of those layers does anything (:func:`lean_step_blocker`), this
    callback gives the fit loop a step that does the same things in the same order with fewer calls:
    ``training_step`` through the strategy (autocast, ``self.log`` names as before), then
    ``on_before_zero_grad``, ``optimizer_zero_grad``, ``on_before_backward``, ``backward``,
    ``on_after_backward``, ``on_before_optimizer_step`` inside ``optimizer.step(closure)``, with
    Lightning's progress counters (``global_step``, checkpoints) moved exactly as Lightning moves them.
    Each step hook reaches the callbacks and the module that implement it, with ``_current_fx_name`` set
    as Lightning's dispatch sets it (:func:`hook_name_setter`).
    Anything else (accumulation, clipping, DDP, a profiler, an overridden ``optimizer_step``) runs
    Lightning's step unchanged. ``tests/unit/test_upstream_pins.py`` pins the internals it uses.
    """

    graph: StepGraph | None = None  # this fit's whole-step capture (--speed.cuda_graph), if on

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()
        self.blocker = fast_path_problem(trainer) or lean_step_blocker(trainer, pl_module)
        wanted = _capture_wanted(trainer)
        if self.blocker is not None:
            if wanted is not None:
                messages.tell(messages.CUDA_GRAPH_ASIDE.format(reason=self.blocker))
            return
        epoch_loop = trainer.fit_loop.epoch_loop
        optimization = epoch_loop.automatic_optimization
        lean = _LeanStep(trainer, optimization)
        if wanted is not None:  # the capture's module only where it is asked for
            from lit_gpu.fastpath.graph import StepGraph, capture_blocker

            if not stands_aside(
                "capture"
            ):  # else the gate's line: a torch or Lightning it was not verified on
                reason = capture_blocker(trainer, pl_module, trainer.strategy.root_device)
                if reason is not None:
                    messages.tell(messages.CUDA_GRAPH_ASIDE.format(reason=reason))
                else:
                    self.graph = lean.graph = StepGraph(trainer, trainer.optimizers[0], warmup=wanted)
        self._patch(optimization, "run", lean.run)
        self._patch(epoch_loop, "_build_kwargs", lean.build_kwargs)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.graph is not None:
            self.graph.plain_checkpoint(checkpoint)

    @override
    def _restore(self) -> None:
        super()._restore()
        if self.graph is not None:
            self.graph.release()
            self.graph = None


def _capture_wanted(trainer: pl.Trainer) -> int | None:
    """The warm-up steps of the whole-step capture a ``SpeedLevers`` asks for (``cuda_graph``), or None."""
    for cb in trainer.callbacks:
        if getattr(cb, "cuda_graph", False) is True and isinstance(
            getattr(cb, "cuda_graph_warmup", None), int
        ):
            return cb.cuda_graph_warmup
    return None


class _LeanStep:
    """One fit's lean ``_AutomaticOptimization.run`` and ``_TrainingEpochLoop._build_kwargs``."""

    def __init__(self, trainer: pl.Trainer, optimization: Any) -> None:
        from lightning.pytorch.loops.optimization.automatic import ClosureResult, _AutomaticOptimization
        from lightning.pytorch.loops.progress import _StartedTracker

        self.trainer, self.optimization = trainer, optimization
        self.module, self.strategy = trainer.lightning_module, trainer.strategy  # fixed for the fit
        self.fallback = _AutomaticOptimization.run.__get__(optimization)
        self.result_cls = ClosureResult
        self._takes_batch_idx: dict[Any, bool] = {}
        self._dispatch = HookDispatch(trainer, self.module)
        self.direct = _plain_strategy_step(trainer)
        # the step's counters are the trackers Lightning makes (moved here without its type checks)
        zero_grad = optimization.optim_progress.optimizer.zero_grad
        self.plain_progress = isinstance(zero_grad.total, _StartedTracker)
        self.graph: StepGraph | None = None  # set by LeanOptimizerStep when the capture is on

    def build_kwargs(self, kwargs: Any, batch: Any, batch_idx: int) -> Any:
        """Lightning's ``_build_kwargs`` with the ``training_step`` signature read once per function."""
        kwargs["batch"] = batch
        step = self.module.training_step
        key = getattr(step, "__func__", step)
        takes = self._takes_batch_idx.get(key)
        if takes is None:
            from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature

            takes = self._takes_batch_idx[key] = is_param_in_hook_signature(step, "batch_idx", min_args=2)
        if takes:
            kwargs["batch_idx"] = batch_idx
        return kwargs

    def run(self, optimizer: torch.optim.Optimizer, batch_idx: int, kwargs: Any) -> dict[str, Any]:
        trainer, optimization = self.trainer, self.optimization
        if trainer.accumulate_grad_batches != 1 or optimization._skip_backward or not self.plain_progress:
            return self.fallback(optimizer, batch_idx, kwargs)
        graph = self.graph
        if graph is not None:
            loss = graph.run(kwargs["batch"])
            if loss is not None:
                return self._replayed(graph, loss)
        module, strategy, direct, dispatch = self.module, self.strategy, self.direct, self._dispatch
        set_name = dispatch.set_name  # the hook names, set around each call below as the dispatch sets them
        progress = optimization.optim_progress.optimizer
        zero_grad_total, zero_grad_current = progress.zero_grad.total, progress.zero_grad.current
        outcome: list[Any] = []

        def closure() -> torch.Tensor | None:
            grad_was = torch.is_grad_enabled()  # torch.enable_grad(), without its context-manager calls
            torch._C._set_grad_enabled(True)
            try:
                previous = module._current_fx_name
                set_name("training_step")
                try:
                    if direct:  # what Strategy.training_step comes to here, without its context managers
                        output = module.training_step(*kwargs.values())
                    else:
                        output = strategy.training_step(*kwargs.values())
                finally:
                    set_name(previous)
                if not direct:
                    strategy.post_training_step()
                if isinstance(output, torch.Tensor):
                    # Lightning's ClosureResult less its ``loss / 1`` (exact, forward and backward: one
                    # kernel and one autograd node fewer) and the dataclass around it
                    loss, detached = output, output.detach().clone()
                    outcome[:] = [detached, None]
                else:
                    result = self.result_cls.from_training_step_output(output, 1)
                    loss, detached = result.closure_loss, result.loss
                    outcome[:] = [detached, result.extra]
                if loss is None:
                    _warn_none()
                zero_grad_total.ready += 1  # progress.zero_grad.increment_ready()
                zero_grad_current.ready += 1
                # `if dispatch.calls(hook)`, inline here and below: an idle hook costs no Python call
                cbs = trainer.callbacks
                known = cbs is dispatch._seen and len(cbs) == dispatch._seen_len
                if not known or "on_before_zero_grad" not in dispatch.idle:
                    dispatch("on_before_zero_grad", optimizer)
                zero_grad_total.started += 1  # progress.zero_grad.increment_started()
                zero_grad_current.started += 1
                epoch = trainer.fit_loop.epoch_progress.current.completed  # trainer.current_epoch (pinned)
                previous = module._current_fx_name
                set_name("optimizer_zero_grad")
                try:
                    module.optimizer_zero_grad(epoch, batch_idx, optimizer)
                finally:
                    set_name(previous)
                zero_grad_total.completed += 1  # progress.zero_grad.increment_completed()
                zero_grad_current.completed += 1
                if loss is not None:
                    if not direct:
                        strategy.pre_backward(loss)
                    cbs = trainer.callbacks
                    known = cbs is dispatch._seen and len(cbs) == dispatch._seen_len
                    if not known or "on_before_backward" not in dispatch.idle:
                        dispatch("on_before_backward", loss)
                    previous = module._current_fx_name
                    set_name("backward")
                    try:
                        module.backward(loss)
                    finally:
                        set_name(previous)
                    cbs = trainer.callbacks
                    known = cbs is dispatch._seen and len(cbs) == dispatch._seen_len
                    if not known or "on_after_backward" not in dispatch.idle:
                        dispatch("on_after_backward")
                    if not direct:
                        strategy.post_backward(loss.detach())
            finally:
                torch._C._set_grad_enabled(grad_was)
            cbs = trainer.callbacks
            known = cbs is dispatch._seen and len(cbs) == dispatch._seen_len
            if not known or "on_before_optimizer_step" not in dispatch.idle:
                dispatch("on_before_optimizer_step", optimizer)
            return detached

        step_total, step_current = progress.step.total, progress.step.current
        step_total.ready += 1  # progress.step.increment_ready()
        step_current.ready += 1
        previous = module._current_fx_name
        set_name("optimizer_step")
        try:
            optimizer.step(closure=closure)
        finally:
            set_name(previous)
        step_total.completed += 1  # progress.step.increment_completed()
        step_current.completed += 1
        if not outcome:  # the optimizer never called the closure: Lightning's error, as its loop raises it
            _closure_not_run()
        if outcome[0] is None:  # training_step gave None
            return {}
        loss, extra = outcome
        return {"loss": loss} if extra is None else {"loss": loss, **extra}

    def _replayed(self, graph: StepGraph, loss: torch.Tensor) -> dict[str, Any]:
        """The rest of a step whose arithmetic ran in ``graph``: logging, metrics, counters, in order."""
        progress = self.optimization.optim_progress.optimizer
        step, zero_grad = progress.step, progress.zero_grad
        step.total.ready += 1
        step.current.ready += 1
        module, set_name = self.module, self._dispatch.set_name
        previous = module._current_fx_name
        set_name("training_step")
        try:
            static = graph.static
            module._record_step("train", static[0], static[1], graph.outputs, loss)
        finally:
            set_name(previous)
        for counter in (zero_grad.total, zero_grad.current):
            counter.ready += 1
            counter.started += 1
            counter.completed += 1
        graph.after_replay(loss)
        step.total.completed += 1
        step.current.completed += 1
        return {"loss": loss}


def _plain_strategy_step(trainer: pl.Trainer) -> bool:
    """Whether the strategy's step hooks come to the module's own ``training_step`` and nothing else.

    So they do with Lightning's ``Strategy`` hooks, an unwrapped module and the plain fp32
    ``Precision`` (its ``train_step_context`` enters ``nullcontext``): pinned in
    tests/unit/test_upstream_pins.py.
    """
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.strategies import Strategy

    strategy = type(trainer.strategy)
    return (
        type(trainer.precision_plugin) is Precision
        and trainer.strategy.model is trainer.lightning_module
        and all(
            getattr(strategy, hook) is getattr(Strategy, hook)
            for hook in ("training_step", "post_training_step", "pre_backward", "post_backward")
        )
    )


def _closure_not_run() -> None:
    """Raise Lightning's ``MisconfigurationException`` for an optimizer step that never ran the closure."""
    from types import SimpleNamespace

    from lightning.pytorch.loops.optimization.closure import AbstractClosure

    AbstractClosure.consume_result(SimpleNamespace(_result=None))  # type: ignore[arg-type]


def _warn_none() -> None:
    from lightning.pytorch.loops.optimization.automatic import Closure

    Closure.warning_cache.warn(
        "`training_step` returned `None`. If this was on purpose, ignore this warning..."
    )


__all__ = [
    "BATCH_HOOKS",
    "MODULE_HOOKS",
    "FitPatch",
    "HookDispatch",
    "LeanOptimizerStep",
    "SkipIdleHooks",
    "hook_name_setter",
    "idle_hooks",
    "lean_step_blocker",
    "replaced_on_instance",
]
