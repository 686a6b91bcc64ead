"""One step of the optimizer from a checkpoint's per-parameter state, on copies: the weights stay finite.

torch's ``Optimizer.load_state_dict`` takes each saved state tensor as it is (cast to its parameter's dtype
and device). The upstream's own definition of a state the optimizer can continue from is that its ``step()``
from it keeps the weights finite: Adam's ``exp_avg_sq``, Adagrad's ``sum``, RMSprop's and Adadelta's square
averages go under a square root, so a negative value (torch never writes one: they are sums of squares) is
NaN in every weight the first step touches, and ``last.ckpt`` holds it one step later. Here each parameter's
saved state steps once, with a zero gradient, on a copy of the parameter (its device and dtype, torch's own
casting by ``load_state_dict``), in slices of at most :data:`CHUNK` values along the first dimension where
every state tensor has the parameter's shape; a parameter whose state is structured otherwise (Adafactor's
factored variances, LBFGS's flat history) steps whole up to :data:`CHUNK` values and is left to the other
checks above it. A step that raises is not taken as a verdict (the settings' own dry step is
:mod:`lit_gpu.files.optimizer_dry`'s); ``SparseAdam`` (sparse gradients only) is not stepped. Used by
:func:`lit_gpu.files.optimizer_fit.optimizer_problem`.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch

__all__ = ["CHUNK", "first_step_problem"]

#: the most values of a parameter one probe step copies (a slice of rows of a larger one)
CHUNK = 2**20


def _slices(
    param: torch.Tensor, state: Mapping[str, Any]
) -> Iterator[tuple[slice | None, Mapping[str, Any]]]:
    """(rows of ``param`` or None for all of it, the state for them), bounded by :data:`CHUNK` values each."""
    tensors = [v for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
    rowwise = param.dim() > 0 and all(tuple(v.shape) == tuple(param.shape) for v in tensors)
    if not rowwise:
        if param.numel() <= CHUNK:
            yield None, state
        return
    per_row = max(1, math.prod(param.shape[1:]))  # a zero-size dimension: no row to index
    rows = max(1, CHUNK // per_row)
    for start in range(0, param.shape[0], rows):
        part = slice(start, start + rows)
        yield part, {k: v[part] if isinstance(v, torch.Tensor) and v.dim() else v for k, v in state.items()}


def _blank(param: torch.Tensor, state: Mapping[str, Any]) -> torch.Tensor:
    """The elements of ``param`` whose every state value is zero: the state torch writes before a step
    (Adagrad's ``sum`` and ``step`` at construction, kept by a parameter that never gets a gradient) or for
    zero gradients. From it the probe's zero gradient is ``0/0`` where ``eps`` is 0 in the parameter's dtype
    (Adagrad's 1e-10 in float16), as torch's own step is: not a verdict on the state."""
    blank = torch.ones(param.shape, dtype=torch.bool, device=param.device)
    for value in state.values():
        if isinstance(value, torch.Tensor) and tuple(value.shape) == tuple(param.shape):
            blank &= (value == 0).to(blank.device)
            continue
        if bool(value.any()) if isinstance(value, torch.Tensor) else isinstance(value, int | float) and value:
            return torch.zeros_like(blank)
    return blank


def _step_is_finite(
    cls: type, settings: dict[str, Any], param: torch.Tensor, state: Mapping[str, Any]
) -> bool:
    probe = param.detach().clone()
    probe.grad = torch.zeros_like(probe)
    held = {k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for k, v in state.items()}
    try:
        optimizer = cls([{**settings, "params": [probe]}])
        optimizer.load_state_dict({"state": {0: held}, "param_groups": [{**settings, "params": [0]}]})
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the probe's, not the run's
            optimizer.step(lambda: torch.zeros(()))
    except Exception:  # a probe the class does not take (not a verdict on the state): other checks stand
        return True
    return bool((torch.isfinite(probe) | _blank(param, state)).all())


def first_step_problem(saved: Mapping[str, Any], built: torch.optim.Optimizer) -> str | None:
    """The first parameter state in ``saved`` (an optimizer ``state_dict()`` whose groups and state shapes fit
    ``built``) from which one step of ``built``'s class makes weights NaN or infinite; ``None``: none does."""
    if isinstance(built, torch.optim.SparseAdam):
        return None
    cls = type(built)
    for n, group in enumerate(saved["param_groups"]):
        settings = {k: v for k, v in group.items() if k not in ("params", "param_names")}
        params = built.param_groups[n]["params"]
        for j, pid in enumerate(group["params"]):
            state = saved["state"].get(pid)
            if not isinstance(state, Mapping) or not state:
                continue
            param = params[j]
            for part, values in _slices(param, state):
                piece = param if part is None else param[part]
                if not _step_is_finite(cls, settings, piece, values):
                    return (
                        f"state[{pid}]: one step of {cls.__name__} from it makes weights NaN or infinite "
                        "(a value no step of it writes: a negative second moment)"
                    )
    return None
