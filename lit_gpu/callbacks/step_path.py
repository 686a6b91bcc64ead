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

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.core.hooks import ModelHooks
from typing_extensions import override

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
