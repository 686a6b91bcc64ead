"""The fast path's plumbing: when it runs (the gate's "fast path" feature, this fit's objects, the cases it
leaves to Lightning), idle hooks hidden, one fit's patches, Lightning's hook dispatch, the no-op profiler.

Keep Lightning from dispatching per-batch hooks that do nothing (lit_gpu's and Lightning's own objects).

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

Lightning also wraps every hook call in ``trainer.profiler.profile(name)``; its default
``PassThroughProfiler`` records nothing, but its ``profile`` is a generator-based context manager, about 8
Python calls each time, some 150 times a training step. :class:`NoProfiler` returns one shared
``nullcontext`` instead. A profiler the user asks for (``--trainer.profiler simple``) is left as it is.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.hooks import ModelHooks
from lightning.pytorch.profilers import PassThroughProfiler
from typing_extensions import override

from lit_gpu.fastpath import PlainHookName, own_hook
from lit_gpu.upstream import FIT_PRIVATE_NAMES, problem, stands_aside, tell_once

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


def replaced_on_instance(obj: object, name: str) -> bool:
    """Whether ``obj`` has its own ``name`` attribute (a wrapper or function set on the object, not its
    class): Lightning calls it, so a lean path that would skip the call must stand aside."""
    return callable(vars(obj).get(name)) if hasattr(obj, "__dict__") else False


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


#: ``__setattr__`` methods that store a ``str``/``None`` ``_current_fx_name`` in the instance ``__dict__``
#: unchanged: for these the name is written there directly, without a Python call per write
_PLAIN_SETATTR = (PlainHookName.__setattr__, torch.nn.Module.__setattr__)


def hook_name_setter(module: pl.LightningModule) -> Callable[[str | None], None]:
    """``set_name(value)`` that sets ``module._current_fx_name`` as ``setattr`` would, without a Python call
    where the module's ``__setattr__`` stores it in the instance ``__dict__`` unchanged."""
    if type(module).__setattr__ in _PLAIN_SETATTR:
        return functools.partial(module.__dict__.__setitem__, "_current_fx_name")
    return functools.partial(setattr, module, "_current_fx_name")


# ---- the gate: the "fast path" feature of lit_gpu.upstream's table, plus this fit's objects ----------
def _fit_problem(trainer: Any) -> str | None:
    for path in FIT_PRIVATE_NAMES:
        obj = trainer
        for name in path.split("."):
            if not hasattr(obj, name):
                return f"this fit's trainer has no {path}"
            obj = getattr(obj, name)
    return None


def fast_path_problem(trainer: Any) -> str | None:
    """Why this fit runs stock Lightning's loop (the reason is told once per process), or None."""
    if stands_aside("fast path"):
        return problem("fast path")
    reason = _fit_problem(trainer)
    if reason is not None:
        tell_once("fast path", reason)
    return reason


# ---- when the fast path leaves a fit to Lightning --------------------------------------------------
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


# ---- the profiler that profiles nothing ------------------------------------------------------------
_NOTHING = contextlib.nullcontext()


class NoProfiler(PassThroughProfiler):
    """``PassThroughProfiler`` whose ``profile(name)`` costs one call: nothing is recorded either way."""

    @override
    def profile(self, action_name: str) -> Any:  # type: ignore[override]
        return _NOTHING


def skip_idle_profiler(trainer: Any) -> bool:
    """Give ``trainer`` a :class:`NoProfiler` if it has Lightning's do-nothing default; whether it did."""
    if type(trainer.profiler) is PassThroughProfiler:
        trainer.profiler = NoProfiler()
        return True
    return False


__all__ = [
    "BATCH_HOOKS",
    "MODULE_HOOKS",
    "TRANSFER_HOOKS",
    "FitPatch",
    "HookDispatch",
    "NoProfiler",
    "SkipIdleHooks",
    "fast_path_problem",
    "hook_name_setter",
    "idle_hooks",
    "lean_batch_blocker",
    "lean_step_blocker",
    "replaced_on_instance",
    "skip_idle_profiler",
    "transfer_hooks_overridden",
]
