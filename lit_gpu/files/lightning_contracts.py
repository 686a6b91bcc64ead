"""The contracts lit_gpu declares for what Lightning restores: the checkpoint's top level and the optimizer.

Lightning's restore reads these parts of a checkpoint without checking them: a forged type, shape or
flag ends in a traceback deep in Lightning or torch. :func:`check_restored_state` (``lit_gpu.io``) runs
them with the owners' own contracts (:mod:`lit_gpu.files.contracts`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.files.contracts import _MAX_INT, EACH, Contract, checked, holds, integer

__all__ = ["lightning_contract", "optimizer_contract"]


# ---- the optimizer's state against the model's parameters (restored by Lightning, checked by lit_gpu) -----
_FACTORED = frozenset({"row_var", "col_var", "variance"})  # factored second moments (Adafactor)
_GROUP_NUMBERS = ("lr", "momentum", "weight_decay", "eps", "dampening", "alpha", "lr_decay", "initial_lr")
_GROUP_FLAGS = (
    "maximize",
    "foreach",
    "amsgrad",
    "nesterov",
    "capturable",
    "differentiable",
    "fused",
    "decoupled_weight_decay",
)


_MAX_HYPER = 1e9  # a learning rate, momentum, decay or epsilon beyond this is no setting
_DEVICE_FLAGS = ("capturable", "fused")  # modes torch runs on accelerators only


def _group_problem(group: Mapping[str, Any]) -> str | None:
    """What is wrong with one saved param group (numbers finite and >= 0, flags bools, betas in [0, 1])."""
    needed = {"lr", "params"}
    if "amsgrad" in group:  # the Adam family
        needed |= {"betas", "eps", "weight_decay"}
    if "nesterov" in group:  # SGD
        needed |= {"momentum", "dampening", "weight_decay"}
    if missing := needed - set(group):
        return f"a param group without {sorted(missing)[0]!r}, which its optimizer reads"
    for key, value in group.items():
        if not isinstance(key, str):
            return f"a param group key {holds(key)}"
        if key == "params":
            continue
        if key in _GROUP_FLAGS:
            if value is not None and type(value) is not bool:
                return f"param group {key}={holds(value)}, not a bool"
            if value and key in _DEVICE_FLAGS and not torch.cuda.is_available():
                return f"param group {key}=True, which needs a GPU this machine does not have"
        elif key in _GROUP_NUMBERS:
            if type(value) not in (int, float) or not 0 <= value <= _MAX_HYPER:
                return f"param group {key}={holds(value)}, not a number in [0, {_MAX_HYPER:g}]"
        elif key == "betas":
            if not (isinstance(value, list | tuple) and len(value) == 2) or any(
                type(b) not in (int, float) or not 0 <= b <= 1 for b in value
            ):
                return f"param group betas={holds(value)}, not two numbers in [0, 1]"
        elif not (
            value is None or type(value) in (bool, int, str) or type(value) is float and math.isfinite(value)
        ):
            return f"param group {messages.shown(key, limit=30)}={holds(value)}, not a plain value"
    return None


def _needed(group: Mapping[str, Any]) -> set[str]:
    """The per-parameter keys the optimizer of ``group`` reads from a non-empty state."""
    if "betas" in group:  # the Adam family
        return {"step", "exp_avg"} | ({"max_exp_avg_sq"} if group.get("amsgrad") else set())
    if "nesterov" in group and group.get("momentum"):  # SGD with momentum
        return {"momentum_buffer"}
    return set()


def _second_moment(group: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether a non-empty state of the Adam family holds its second moment (``exp_avg_sq``, Adamax's
    ``exp_inf``); other optimizers need none."""
    if "betas" in group:
        return "exp_avg_sq" in values or "exp_inf" in values
    return True


def lightning_contract() -> list[Contract]:
    """The top level of a Lightning checkpoint as Lightning's restore reads it (types of its parts)."""
    plain_dict = checked("a dict", lambda v: None if isinstance(v, Mapping) else "")
    plain_list = checked("a list", lambda v: None if isinstance(v, list) else "")
    weights = checked(
        "a dict of str names to tensors",
        lambda v: (
            None
            if isinstance(v, Mapping)
            and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in v.items())
            else ""
        ),
    )
    counter = integer(0, _MAX_INT)
    owner = "Lightning's restore"
    return [
        Contract(("epoch",), counter, owner=owner),
        Contract(("global_step",), counter, owner=owner),
        Contract(("state_dict",), weights, owner=owner),
        Contract(("loops",), plain_dict, owner=owner),
        Contract(("loops", EACH), plain_dict, owner=owner),
        Contract(("loops", "fit_loop", "state_dict"), plain_dict, owner=owner),
        Contract(("loops", "fit_loop", "state_dict", "combined_loader"), plain_list, owner=owner),
        Contract(("callbacks",), plain_dict, owner=owner),
        Contract(("lr_schedulers",), plain_list, owner=owner),
        Contract(("lr_schedulers", EACH), plain_dict, owner=owner),
        Contract(("hyper_parameters",), plain_dict, owner=owner),
    ]


def optimizer_contract(parameters: Sequence[torch.Tensor]) -> list[Contract]:
    """Each saved optimizer state: its param groups' numbers, and per-parameter tensors shaped as the model's
    parameters (``parameters`` in the order an optimizer over ``module.parameters()`` numbers them)."""
    shapes = [tuple(p.shape) for p in parameters]

    def per_param(state: Any) -> str | None:
        if not isinstance(state, Mapping):
            return ""
        groups = state.get("param_groups")
        if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
            return "param_groups that are not a list of dicts"
        ids: list[Any] = [i for g in groups for i in (g.get("params") or [])]
        if not all(type(i) is int for i in ids) or len(set(ids)) != len(ids):
            return "param ids that are not distinct ints"
        for g in groups:
            if (problem := _group_problem(g)) is not None:
                return problem
        position = {pid: n for n, pid in enumerate(ids)}
        group_of = {pid: g for g in groups for pid in (g.get("params") or [])}
        per = state.get("state")
        if not isinstance(per, Mapping):
            return "a per-parameter state that is not a dict"
        for pid, values in per.items():
            if pid not in position or not isinstance(values, Mapping):
                return f"state for param id {holds(pid)}, which no param group names"
            if values and (missing := _needed(group_of[pid]) - set(values)):
                return f"state[{pid}] without {sorted(missing)[0]!r}, which its optimizer reads"
            if values and not _second_moment(group_of[pid], values):
                return f"state[{pid}] without its second moment (exp_avg_sq), which its optimizer reads"
            if any(isinstance(v, torch.Tensor) and v.is_meta for v in values.values()):
                return f"state[{pid}] holds a meta tensor (no data), which its optimizer cannot read"
            step = values.get("step")
            if isinstance(step, torch.Tensor) and (
                step.numel() != 1 or step.is_complex() or not 0 <= float(step) < 2**62
            ):
                return f"state[{pid}]['step'] = {holds(step)}, not one count >= 0"
            shape = shapes[position[pid]] if len(ids) == len(shapes) else None
            for key, value in values.items():
                if not isinstance(value, torch.Tensor):
                    if key == "step" and type(value) in (int, float) and 0 <= value < 2**62:
                        continue
                    if value is None and key == "momentum_buffer":
                        continue
                    return f"state[{pid}][{messages.shown(repr(key), limit=30)}] = {holds(value)}"
                if key != "step" and not value.is_floating_point():
                    return f"state[{pid}][{messages.shown(repr(key), limit=30)}]: {holds(value)}"
                if value.layout != torch.strided or not value.is_contiguous():
                    return (
                        f"state[{pid}][{messages.shown(repr(key), limit=30)}]: not a contiguous dense tensor"
                    )
                if value.dim() == 0 or shape is None:
                    continue
                fits = tuple(value.shape) == shape or key in _FACTORED and value.numel() <= math.prod(shape)
                if not fits:
                    return (
                        f"state[{pid}][{messages.shown(repr(key), limit=30)}] of shape {tuple(value.shape)} "
                        f"for a parameter of shape {shape}"
                    )
        return None

    spec = checked("per-parameter tensors shaped as the model's parameters", per_param)
    states = checked("a list of optimizer states", lambda v: None if isinstance(v, list) else "")
    return [
        Contract(("optimizer_states",), states, owner="the optimizer"),
        Contract(("optimizer_states", EACH), spec, owner="the optimizer"),
    ]
