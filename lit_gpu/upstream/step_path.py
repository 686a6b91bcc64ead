"""Keep Lightning from dispatching per-batch hooks that do nothing (lit_gpu's and Lightning's own objects).

For every hook, every batch, Lightning's dispatch (``lightning.pytorch.trainer.call``) visits each
callback and the module: it builds a profiler name, enters ``trainer.profiler.profile`` and calls
the hook, also when the hook is the base class's empty method. With a dozen callbacks and six
hooks a training step that is a few hundred Python calls of pure bookkeeping. The dispatch skips
an attribute that is not callable, so :class:`SkipIdleHooks` sets the per-batch hooks that a
callback (or the module) leaves as Lightning's no-op to ``None`` on that instance for the run, and
removes them again at teardown. Only objects of lit_gpu's and Lightning's own classes are touched
(a user's callback is left as it is), only hooks their class does not override (what runs is
exactly what ran before), and on the module only the training hooks (Lightning reads the
signatures of its evaluation batch hooks).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.hooks import ModelHooks
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.upstream import PlainHookName, own_hook
from lit_gpu.upstream.gate import fast_path_problem, stands_aside

if TYPE_CHECKING:
    from lit_gpu.upstream.step_graph import StepGraph

#: the hooks Lightning calls once per batch (training, then evaluation and prediction)
BATCH_HOOKS = (
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)

#: the module's subset: Lightning inspects the signatures of the module's evaluation batch hooks
#: (``dataloader_idx``), so only training hooks are hidden there
MODULE_HOOKS = BATCH_HOOKS[:6]

_OWN_PACKAGES = ("lit_gpu.", "lightning.pytorch.", "lightning.fabric.")


def _own(obj: object) -> bool:
    return type(obj).__module__.startswith(_OWN_PACKAGES)


def idle_hooks(obj: object, base: type, hooks: tuple[str, ...] = BATCH_HOOKS) -> list[str]:
    """The ``hooks`` that ``obj``'s class inherits unchanged from ``base`` (empty there)."""
    cls = type(obj)
    return [
        name
        for name in hooks
        if hasattr(base, name) and getattr(cls, name, None) is getattr(base, name) and name not in vars(obj)
    ]


class SkipIdleHooks(Callback):
    """Hides no-op per-batch hooks of lit_gpu's and Lightning's callbacks and module from the dispatch.

    Added by the ``lit-gpu`` CLI. Nothing that ran before stops running: a hook is hidden only
    when its class does not override Lightning's empty one. ``tests/unit/test_upstream_pins.py``
    pins the dispatch behaviour it relies on (a non-callable hook attribute is skipped).
    """

    def __init__(self) -> None:
        super().__init__()
        self._hidden: list[tuple[Any, str]] = []

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()
        if fast_path_problem(trainer) is not None:
            return
        targets: list[tuple[Any, type, tuple[str, ...]]] = [
            (cb, Callback, BATCH_HOOKS) for cb in trainer.callbacks if _own(cb)
        ]
        if isinstance(pl_module, pl.LightningModule) and _own(pl_module):
            targets.append((pl_module, ModelHooks, MODULE_HOOKS))
        for obj, base, hooks in targets:
            for name in idle_hooks(obj, base, hooks):
                object.__setattr__(obj, name, None)  # the dispatch checks callable(); nn.Module too
                self._hidden.append((obj, name))

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()

    def _restore(self) -> None:
        for obj, name in self._hidden:
            if vars(obj).get(name, 0) is None:
                object.__delattr__(obj, name)
        self._hidden.clear()


# ---- the automatic-optimization step without Lightning's dispatch layers ---------------------------
#: LightningModule methods whose override would make the lean step differ from Lightning's: then it
#: stands aside (``optimizer_step`` receives Lightning's closure and optimizer wrapper)
_MODULE_METHODS = ("optimizer_step", "configure_gradient_clipping", "clip_gradients")


def replaced_on_instance(obj: object, name: str) -> bool:
    """Whether ``obj`` has its own ``name`` attribute (a wrapper or function set on the object, not its
    class): Lightning calls it, so a lean path that would skip the call must stand aside."""
    return callable(vars(obj).get(name)) if hasattr(obj, "__dict__") else False


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


class FitPatch(Callback):
    """Base of the lean callbacks: methods replaced on this fit's loop objects by instance attributes.

    :meth:`_patch` sets an instance attribute over the class's method (nothing global changes); every
    one is removed at ``on_train_end``, ``teardown`` and ``on_exception``, and before the next fit
    patches again.
    """

    def __init__(self) -> None:
        super().__init__()
        self._patched: list[tuple[object, str]] = []
        self.blocker: str | None = None  # why the last fit ran Lightning's own code (tests, debugging)

    def _patch(self, obj: object, name: str, fn: Any) -> None:
        setattr(obj, name, fn)
        self._patched.append((obj, name))

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._restore()  # a fit that raised gets no teardown hooks

    def _restore(self) -> None:
        for obj, name in self._patched:
            vars(obj).pop(name, None)
        self._patched = []


class HookDispatch:
    """Lightning's dispatch of one batch or step hook, without profiler contexts (the lean callbacks run
    with none) and only to the objects that implement it: Lightning's empty ``Callback`` and
    ``ModelHooks`` hooks are skipped, a user's callbacks' and module's too (SkipIdleHooks hides only
    lit_gpu's and Lightning's own, from Lightning's dispatch as well).

    The callbacks' first, in their order under one ``_current_fx_name`` (``_call_callback_hooks``),
    then the module's with its own (``_call_lightning_module_hook``); returns the module's output.
    Which callbacks implement a hook is looked up once per hook, again when ``trainer.callbacks`` changes.
    """

    def __init__(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.trainer, self.module = trainer, module
        #: ``set_name(value)`` sets ``module._current_fx_name`` (:func:`hook_name_setter`)
        self.set_name = hook_name_setter(module)
        self._seen: list[Any] | None = None  # the callback list the caches below were built from
        self._seen_len = 0
        self._callback_fns: dict[str, list[Any]] = {}
        self._module_has: dict[str, bool] = {}
        #: hooks that neither a callback in ``_seen`` nor the module implements (:meth:`calls`)
        self.idle: set[str] = set()

    def _appended(self, callbacks: list[Any], hook: str, args: tuple[Any, ...]) -> None:
        """Callbacks appended to ``trainer.callbacks`` while ``hook`` ran: Lightning's dispatch loop over
        the live list reaches them in the same call, so this does too."""
        i = self._seen_len
        while i < len(callbacks):
            fn = own_hook(callbacks[i], hook, Callback)
            if fn is not None:
                fn(self.trainer, self.module, *args)
            i += 1

    def calls(self, hook: str) -> bool:
        """Whether ``self(hook, ...)`` may call anything: False for a hook found idle with the same callbacks.
        Written inline where a step asks it (no Python call): ``hook not in idle`` after this check."""
        callbacks = self.trainer.callbacks
        return not (callbacks is self._seen and len(callbacks) == self._seen_len and hook in self.idle)

    def __call__(self, hook: str, *args: Any) -> Any:
        trainer, module = self.trainer, self.module
        callbacks = trainer.callbacks
        if callbacks is not self._seen or len(callbacks) != self._seen_len:
            self._seen, self._seen_len, self._callback_fns = callbacks, len(callbacks), {}
            self.idle = set()
        fns = self._callback_fns.get(hook)
        if fns is None:  # any callback's hook but Lightning's empty one (a user callback's too)
            found = (own_hook(cb, hook, Callback) for cb in callbacks)
            fns = self._callback_fns[hook] = [fn for fn in found if fn is not None]
        has = self._module_has.get(hook)
        if has is None:
            has = self._module_has[hook] = own_hook(module, hook, ModelHooks) is not None
        set_name = self.set_name
        if not fns and not has:
            self.idle.add(hook)
            return None
        if fns:
            previous = module._current_fx_name
            set_name(hook)
            try:
                for fn in fns:
                    fn(trainer, module, *args)
                if len(callbacks) > self._seen_len and callbacks is self._seen:
                    self._appended(callbacks, hook, args)
            finally:
                set_name(previous)
        if not has:
            return None
        previous = module._current_fx_name
        set_name(hook)
        try:
            return getattr(module, hook)(*args)
        finally:
            set_name(previous)


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
            from lit_gpu.upstream.step_graph import StepGraph, capture_blocker

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
            self.graph.restore_optimizer()
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


#: ``__setattr__`` methods that store a ``str``/``None`` ``_current_fx_name`` in the instance ``__dict__``
#: unchanged: for these the name is written there directly, without a Python call per write
_PLAIN_SETATTR = (PlainHookName.__setattr__, torch.nn.Module.__setattr__)


def hook_name_setter(module: pl.LightningModule) -> Callable[[str | None], None]:
    """``set_name(value)`` that sets ``module._current_fx_name`` as ``setattr`` would, without a Python call
    where the module's ``__setattr__`` stores it in the instance ``__dict__`` unchanged."""
    if type(module).__setattr__ in _PLAIN_SETATTR:
        return functools.partial(module.__dict__.__setitem__, "_current_fx_name")
    return functools.partial(setattr, module, "_current_fx_name")


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
