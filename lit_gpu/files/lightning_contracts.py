"""The contracts lit_gpu declares for what Lightning restores: the checkpoint's top level and the optimizer.

Lightning's restore reads these parts of a checkpoint without checking them: a forged type, shape or
flag ends in a traceback deep in Lightning or torch. :func:`check_restored_state` (``lit_gpu.io``) runs
them with the owners' own contracts (:mod:`lit_gpu.files.contracts`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.files.contracts import _MAX_INT, EACH, Contract, Spec, checked, holds, integer
from lit_gpu.upstream.loops import saved_batches_that_stepped, saved_loop_counters

__all__ = ["counters_problem", "lightning_contract", "optimizer_contract", "scheduler_contract"]


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


# ---- the loops' progress (restored by Lightning: ``tracker.__dict__.update(state)``) ----------------------
_COUNTS = frozenset({"ready", "started", "processed", "completed"})  # a tracker's counts
#: a progress' parts by the last part of its key: what Lightning's ``load_state_dict`` reads (all of them)
_PROGRESS_PARTS = {
    "optim_progress": {"optimizer": {"step": "progress", "zero_grad": "progress"}},
    "batch_progress": {"total": "tracker", "current": "tracker", "is_last_batch": "flag"},
}
_PROGRESS = {"total": "tracker", "current": "tracker"}  # epoch_progress, scheduler_progress, ...


def _progress_problem(value: Any, parts: Any, where: str) -> str | None:
    """What is wrong with one saved progress ``value`` shaped as ``parts`` (``None``: nothing).

    Every part Lightning reads is there and nothing else: a tracker holds counts in [0, 2**62] under its
    own names only (another key would become an attribute, ``reset`` shadowing its method).
    """
    if parts == "flag":
        return None if type(value) is bool else f"{where} = {holds(value)}, not a bool"
    if parts == "progress":
        parts = _PROGRESS
    if not isinstance(value, Mapping):
        return f"{where} = {holds(value)}, not a dict"
    if parts == "tracker":
        for key, count in value.items():
            if key not in _COUNTS:
                shown = messages.shown(repr(key), limit=40)
                return f"{where} key {shown}, which would replace an attribute of Lightning's progress"
            if type(count) is not int or not 0 <= count <= _MAX_INT:
                return f"{where}[{key!r}] = {holds(count)}, not a count in [0, 2**62]"
        return None
    if set(value) != set(parts):
        extra = sorted(map(repr, set(value) ^ set(parts)))[0]
        return f"{where} with {messages.shown(extra, limit=40)} (Lightning reads {', '.join(sorted(parts))})"
    for key, part in parts.items():
        if (problem := _progress_problem(value[key], part, f"{where}.{key}")) is not None:
            return problem
    return None


def _loop_problem(loop: Any, plain_batches: bool = False) -> str | None:
    """What is wrong with one loop's saved state (``loops.fit_loop`` and the like): its own state dicts
    are dicts (``_batches_that_stepped`` a count), every ``*progress`` is shaped as Lightning reads it
    (``plain_batches``: the predict loop's ``batch_progress`` has no ``is_last_batch``)."""
    if not isinstance(loop, Mapping):
        return ""
    for key, value in loop.items():
        if not isinstance(key, str):
            return f"a key {holds(key)}"
        name = key.rpartition(".")[2]
        where = messages.shown(key, limit=60)
        if name == "state_dict":
            if not isinstance(value, Mapping):
                return f"{where} = {holds(value)}, not a dict"
            steps = saved_batches_that_stepped(value)
            if type(steps) is not int or not 0 <= steps <= _MAX_INT:
                return f"{where}._batches_that_stepped = {holds(steps)}, not a count in [0, 2**62]"
        elif name.endswith("progress"):
            parts = _PROGRESS if plain_batches and name == "batch_progress" else _PROGRESS_PARTS.get(name)
            if (problem := _progress_problem(value, parts or _PROGRESS, where)) is not None:
                return problem
    return None


def counters_problem(checkpoint: Any) -> str | None:
    """How a checkpoint's top-level ``global_step`` / ``epoch`` disagree with its loops' own counters (what
    the resumed fit continues at: :func:`~lit_gpu.upstream.loops.saved_loop_counters`), or None."""
    if not isinstance(checkpoint, Mapping) or not isinstance(checkpoint.get("loops"), Mapping):
        return None
    counters = saved_loop_counters(checkpoint["loops"].get("fit_loop"))
    if counters is None:
        return None
    top = (checkpoint.get("global_step"), checkpoint.get("epoch"))
    names = ("global_step", "epoch")
    wrong = [f"{name} {holds(v)}" for name, v, own in zip(names, top, counters, strict=True) if v != own]
    if not wrong or any(type(v) is not int for v in top):
        return None  # the counters' own contract names a value that is no count
    step, epoch = counters
    return f"top-level {' and '.join(wrong)}, while its loops are at global step {step}, epoch {epoch}"


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
        *(
            Contract(("loops", name), checked("a loop's state as Lightning saves it", test), owner=owner)
            for name, test in (
                *((name, _loop_problem) for name in ("fit_loop", "validate_loop", "test_loop")),
                ("predict_loop", lambda v: _loop_problem(v, plain_batches=True)),
            )
        ),
        Contract(("loops", "fit_loop", "state_dict"), plain_dict, owner=owner),
        Contract(("loops", "fit_loop", "state_dict", "combined_loader"), plain_list, owner=owner),
        Contract(("callbacks",), plain_dict, owner=owner),
        Contract(("lr_schedulers",), plain_list, owner=owner),
        Contract(("lr_schedulers", EACH), scheduler_contract(), owner="the learning-rate scheduler"),
        Contract(("hyper_parameters",), plain_dict, owner=owner),
        Contract(
            (),
            checked("top-level counters equal to its loops' (where it resumes)", counters_problem),
            owner=owner,
        ),
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


# ---- the learning-rate schedulers' states (restored by Lightning: ``scheduler.__dict__.update(state)``) ---
# counts and settings torch's schedulers keep as numbers (a str or a NaN there fails at the next step)
_SCHEDULER_NUMBERS = frozenset(
    {
        "step_size", "gamma", "T_max", "eta_min", "T_0", "T_i", "T_mult", "T_cur", "total_iters", "factor",
        "start_factor", "end_factor", "power", "total_steps", "cooldown", "cooldown_counter", "patience",
        "num_bad_epochs", "threshold", "eps", "best", "step_size_up", "step_size_down", "total_size",
        "step_ratio", "base_momentum", "max_momentum", "div_factor", "final_div_factor", "pct_start",
    }
)  # fmt: skip
_SCHEDULER_RATES = frozenset({"base_lrs", "_last_lr", "min_lrs", "max_lrs", "base_momentums"})
_SCHEDULER_FLAGS = frozenset({"verbose", "_get_lr_called_within_step", "_is_initial", "cycle_momentum"})
_STEP_DIVISORS = frozenset({"step_size", "T_0", "T_max", "total_iters", "total_steps"})  # x % 0 or x / 0


@functools.cache
def _scheduler_methods() -> frozenset[str]:
    """Names of the methods and attributes of torch's schedulers that a saved state must not shadow."""
    from torch.optim import lr_scheduler

    names = {"optimizer"}  # the scheduler's optimizer is never saved; a saved one would replace it
    for cls in vars(lr_scheduler).values():
        if isinstance(cls, type) and issubclass(
            cls, lr_scheduler.LRScheduler | lr_scheduler.ReduceLROnPlateau
        ):
            names |= {
                n
                for n in dir(cls)
                if callable(getattr(cls, n, None)) or isinstance(getattr(cls, n), property)
            }
    return frozenset(names)


def _plain(value: Any, depth: int = 0) -> bool:
    """Plain data (None, bools, ints, non-NaN floats, short strs, lists/tuples/dicts of them, 8 deep)."""
    if value is None or type(value) in (bool, int) or type(value) is str and len(value) <= 4096:
        return True
    if type(value) is float:
        return not math.isnan(value)
    if depth < 8 and isinstance(value, list | tuple) and len(value) <= 2**16:
        return all(_plain(v, depth + 1) for v in value)
    if depth < 8 and isinstance(value, Mapping) and len(value) <= 2**16:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def _rate(value: Any) -> bool:
    if isinstance(value, torch.Tensor):  # torch keeps a tensor learning rate as a tensor
        if value.is_meta or value.numel() != 1 or not value.is_floating_point():
            return False
        return math.isfinite(rate := float(value)) and 0 <= rate <= _MAX_HYPER
    return type(value) in (int, float) and math.isfinite(value) and 0 <= value <= _MAX_HYPER


def _scheduler_problem(state: Any) -> str | None:
    """What is wrong with one saved scheduler state (``None``: nothing); restored as the scheduler's
    attributes, so its keys must not shadow a method (or the optimizer) and its values must be plain data."""
    if not isinstance(state, Mapping):
        return ""
    methods = _scheduler_methods()
    for key, value in state.items():
        if not isinstance(key, str) or not key.isidentifier() or key.startswith("__") or key in methods:
            shown = messages.shown(repr(key), limit=40)
            return f"key {shown}, which would replace the scheduler's own attribute"
        name = messages.shown(key, limit=30)
        if key == "last_epoch":
            if type(value) is not int or not -1 <= value <= _MAX_INT:
                return f"last_epoch={holds(value)}, not an int in [-1, 2**62]"
        elif key == "_step_count":
            if type(value) is not int or not 0 <= value <= _MAX_INT:
                return f"_step_count={holds(value)}, not a count >= 0"
        elif key in _SCHEDULER_RATES:
            if not isinstance(value, list | tuple) or len(value) > 2**16 or not all(map(_rate, value)):
                return f"{name}={holds(value)}, not a list of learning rates in [0, {_MAX_HYPER:g}]"
        elif key in _SCHEDULER_FLAGS:
            if type(value) is not bool:
                return f"{name}={holds(value)}, not a bool"
        elif key in _SCHEDULER_NUMBERS:
            if not (  # best starts at +-inf
                type(value) is int
                and abs(value) <= _MAX_INT
                or type(value) is float
                and (math.isfinite(value) or key == "best" and math.isinf(value))
            ):
                return f"{name}={holds(value)}, not a finite number"
            if key in _STEP_DIVISORS and value <= 0:
                return f"{name}={holds(value)}, not a positive number"
        elif not _plain(value):
            return f"{name}={holds(value)}, not plain data"
    return None


def scheduler_contract() -> Spec:
    """What each of the checkpoint's ``lr_schedulers`` states must be (:func:`_scheduler_problem`)."""
    return checked("a scheduler state (plain values under the scheduler's own names)", _scheduler_problem)
