"""One dry step of a learning-rate scheduler from a checkpoint's state, on a stand-in optimizer.

torch's ``LRScheduler.load_state_dict`` (and ``ReduceLROnPlateau``'s) is ``__dict__.update``: whatever the
saved state holds is what the next ``step()`` computes from. The upstream's own definition of a state a
scheduler can continue from is that its ``step()`` runs from it: a ``OneCycleLR`` whose ``last_epoch`` is
past its ``total_steps`` (``Tried to step 1000000001 times``, a state torch never writes: it raises before),
an unknown ``_anneal_func_type``, a ``CosineAnnealingWarmRestarts`` period ``T_i`` of 0 or a ``CyclicLR``
``total_size`` of 0 (``ZeroDivisionError``) end the first step after the restore in a traceback. Here a
copy of the built scheduler takes the saved state and steps once, writing to a stand-in optimizer that
holds a copy of the built one's param-group settings (one value per group, no parameters); the learning
rates it gives must be finite. Used by :func:`lit_gpu.files.optimizer_fit.scheduler_problem`.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.upstream.torch_hooks import has_scheduler_children

__all__ = ["step_problem"]


def _stand_in_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    groups = [
        {**copy.deepcopy({k: v for k, v in g.items() if k != "params"}), "params": [torch.zeros(1)]}
        for g in optimizer.param_groups
    ]
    return torch.optim.Optimizer(groups, {})


def step_problem(saved: Mapping[str, Any], built: Any) -> str | None:
    """What ends the first ``step()`` of ``built``'s class from ``saved`` (``None``: it steps, to finite
    learning rates). Schedulers of schedulers (``SequentialLR``) are stepped child by child by the caller."""
    optimizer = getattr(built, "optimizer", None)
    if not isinstance(optimizer, torch.optim.Optimizer) or has_scheduler_children(built):
        return None
    if getattr(type(built).step, "__module__", None) != torch.optim.lr_scheduler.__name__:
        return None  # a step() of the user's own (it may log or save): not run for a probe
    clone = copy.copy(built)
    own = {k: v for k, v in vars(built).items() if k != "optimizer"}
    try:  # two levels of copies, never deep: a lr_lambda that is a module's bound method is not copied
        vars(clone).update(
            {k: [copy.copy(x) for x in v] if isinstance(v, list) else copy.copy(v) for k, v in own.items()}
        )
    except Exception:  # a user's scheduler holding what cannot be copied: not stepped
        return None
    clone.optimizer = _stand_in_optimizer(optimizer)
    name = type(built).__name__
    try:
        clone.load_state_dict(copy.deepcopy(dict(saved)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the probe's, not the run's
            if isinstance(built, torch.optim.lr_scheduler.ReduceLROnPlateau):
                clone.step(0.0)
            else:
                clone.step()
    except Exception as err:
        return (
            f"{name} fails to step from its state: {type(err).__name__}: {messages.shown(str(err), limit=80)}"
        )
    for group in clone.optimizer.param_groups:
        lr = group.get("lr")
        value = lr.item() if isinstance(lr, torch.Tensor) and lr.numel() == 1 else lr
        if isinstance(value, int | float) and not math.isfinite(value):
            return f"{name} steps from its state to lr={messages.shown(repr(value), limit=30)}"
    return None
