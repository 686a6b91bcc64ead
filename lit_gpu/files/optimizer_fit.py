"""Whether a checkpoint's optimizer and scheduler states fit the optimizers and schedulers the config builds.

The accepted set is the upstream's own: the ``state_dict()`` of the optimizer (and scheduler) the config
builds, not a list of names. Lightning restores them with ``optimizer.load_state_dict`` (which takes the
saved param-group values, torch's semantics) and ``scheduler.load_state_dict`` (``__dict__.update``): a
state saved by another optimizer, another param-group layout or another schedule ends in a traceback
(``KeyError: 'step'``, ``Tried to step 9 times``) or silently replaces the config's settings. Checked
here, before the restore:

* **the optimizer** (:func:`optimizer_problem`): as many param groups, each with the built group's keys
  and as many parameters, each value of the built value's kind (a number, a bool, ``None``, a tuple of
  them: Adafactor's ``eps=(None, 1e-3)``); each parameter's state has the names and kinds of values
  (tensors shaped after the parameter, numbers, lists: LBFGS's ``old_dirs``) that one step of the built
  optimizer's class, with the built groups' settings, gives a parameter of its shape (a dry run on small
  stand-ins: :func:`dry_state`); and one step of the class from that state, on copies of the parameters,
  keeps them finite (:func:`~lit_gpu.files.optimizer_first_step.first_step_problem`: a negative second
  moment);
* **the scheduler** (:func:`scheduler_problem`): the built scheduler's state keys, values of its kinds,
  and its settings (the ``__init__`` parameters it keeps under their own names: ``total_steps``,
  ``milestones``) equal to the config's.

A difference is one line (:class:`~lit_gpu.files.contracts.ContractError`): what the checkpoint holds,
what the config builds, and the way forward (``--fresh_optimizer true``: keep the weights and the
progress, start the optimizers and schedulers fresh; ``docs/checkpoints.md``).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.files.contracts import ContractError, holds
from lit_gpu.files.optimizer_dry import _stand_in, dry_state, early_keys, settings_problem
from lit_gpu.files.optimizer_first_step import first_step_problem
from lit_gpu.files.scheduler_dry import step_problem
from lit_gpu.files.state_kinds import MAX_INT, keys_problem, kind, value_problem
from lit_gpu.upstream.torch_hooks import scheduler_children

__all__ = ["check_optimizers", "dry_state", "optimizer_problem", "scheduler_problem", "saved_optimizer_name"]

_MAX_LIST = 2**16


# ---- the optimizer --------------------------------------------------------------------------------------
@functools.cache
def _class_keys() -> tuple[tuple[str, frozenset[str]], ...]:
    """Each torch.optim optimizer's param-group keys (its defaults), to name what a checkpoint holds."""
    found = []
    for name, cls in vars(torch.optim).items():
        if (
            isinstance(cls, type)
            and issubclass(cls, torch.optim.Optimizer)
            and cls is not torch.optim.Optimizer
        ):
            try:
                found.append((name, frozenset(cls([torch.nn.Parameter(torch.zeros(2, 2))]).defaults)))
            except Exception:  # noqa: S112  # a class that needs arguments: not named
                continue
    return tuple(found)


def saved_optimizer_name(saved: Any) -> str:
    """Which torch optimizer wrote ``saved`` (from its param groups' keys): ``"SGD"``, ``"Adam or AdamW"``."""
    groups = saved.get("param_groups") if isinstance(saved, Mapping) else None
    if not (isinstance(groups, list) and groups and isinstance(groups[0], Mapping)):
        return "an optimizer state"
    keys = set(groups[0])
    fits = [(len(k), n) for n, k in _class_keys() if k <= keys]
    if not fits:
        return "an optimizer with param groups of " + ", ".join(sorted(map(str, keys - {"params"}))[:6])
    best = max(size for size, _ in fits)
    return " or ".join(n for size, n in fits if size == best)


def _dims(
    value: torch.Tensor, stand_in: tuple[int, ...], real: tuple[int, ...], totals: tuple[int, int]
) -> tuple[int, ...]:
    """The shape a dry-run state tensor of a stand-in parameter has for the real one."""
    shape = []
    for j, size in enumerate(value.shape):
        if j < len(stand_in) and size == stand_in[j] and size != 1:
            shape.append(real[j])
        elif size == math.prod(stand_in):
            shape.append(math.prod(real))
        elif size == totals[0]:  # all the group's parameters flattened (LBFGS)
            shape.append(totals[1])
        else:
            shape.append(size)
    return tuple(shape)


def _state_problem(
    saved: Any,
    dry: dict[str, Any],
    real: tuple[int, ...],
    stand: tuple[int, ...],
    totals: tuple[int, int],
    name: str,
    nones: Mapping[str, Any],
    early: set[frozenset[str]] | None = None,
) -> str | None:
    """``nones``: the state one step with the checkpoint's own settings gives (a ``None`` there is one the
    optimizer reads: SGD's ``momentum_buffer`` with ``momentum=0``); a ``None`` elsewhere is a forgery the
    optimizer's step ends on (``'NoneType' object has no attribute 'lerp_'``). ``early``: the names torch
    writes before they settle to ``dry``'s (:func:`~lit_gpu.files.optimizer_dry.early_keys`)."""
    if not isinstance(saved, Mapping):
        return f"{name} = {holds(saved)}, not a dict"
    if not saved:
        return None  # a parameter that never had a gradient
    if set(saved) != set(dry) and frozenset(saved) not in (early or set()):
        return keys_problem(saved, dict.fromkeys(dry), name)
    for key, value in dry.items():
        if key not in saved:
            continue
        where = f"{name}[{messages.shown(repr(key), limit=30)}]"
        got = saved[key]
        none_read = value is None or key in nones and nones[key] is None
        if kind(got) != kind(value) and not (value is None or got is None and none_read):
            return f"{where} is {kind(got)}, where the config's optimizer keeps {kind(value)}"
        items = (
            list(zip(got, value, strict=False))
            if isinstance(value, list | tuple) and isinstance(got, list | tuple)
            else [(got, value)]
        )
        if isinstance(got, list | tuple) and len(got) > _MAX_LIST:
            return f"{where} holds {len(got)} values"
        if isinstance(got, list | tuple) and len(got) > len(value):  # LBFGS's history grows: as its elements
            items += [(g, value[0] if value else g) for g in got[len(value) :]]
        for g, v in items:
            if problem := _tensor_problem(g, v, real, stand, totals, where):
                return problem
    return None


def _tensor_problem(
    got: Any, value: Any, real: tuple[int, ...], stand: tuple[int, ...], totals: tuple[int, int], where: str
) -> str | None:
    if not isinstance(got, torch.Tensor):
        if isinstance(got, numbers.Real) and where.endswith("'step']") and not 0 <= got < MAX_INT:
            return f"{where} = {holds(got)}, not a count"
        return None
    if got.is_meta:
        return f"{where} holds a meta tensor (no data), which its optimizer cannot read"
    if got.layout != torch.strided or not got.is_contiguous():
        return f"{where}: not a contiguous dense tensor"
    like = value if isinstance(value, torch.Tensor) else torch.zeros(())  # a number: a float scalar
    if (got.is_complex(), got.dtype.is_floating_point) != (like.is_complex(), like.dtype.is_floating_point):
        return f"{where}: {holds(got)}, where the config's optimizer keeps a {like.dtype} tensor"
    if (got.is_floating_point() or got.is_complex()) and not bool(torch.isfinite(got).all()):
        # what one step of the optimizer keeps is finite; a NaN or inf here is in every weight after it
        return f"{where} holds NaN or infinite values (a step from it makes every weight NaN)"
    if where.endswith("'step']") and got.dim() == 0 and not 0 <= float(got) < MAX_INT:
        return f"{where} = {holds(got)}, not a count"
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        expected = _dims(value, stand, real, totals)
        if tuple(got.shape) != expected:
            return f"{where} of shape {tuple(got.shape)}, where the config's optimizer keeps {expected}"
    elif got.dim() > 1 or got.dim() == 1 and got.numel() > totals[1]:
        return f"{where} of shape {tuple(got.shape)} for parameters of {totals[1]} values"
    return None


def _filled_keys(groups: list[Any], built: torch.optim.Optimizer) -> list[set[str]] | None:
    """The param-group keys the built optimizer's class fills in itself when a saved group lacks them: its
    ``__setstate__`` (which ``load_state_dict`` runs: ``setdefault`` of flags later torch releases added)."""
    try:
        probe = type(built).__new__(type(built))
        plain = [{k: v for k, v in g.items() if k != "params"} for g in groups]
        probe.__setstate__(
            {
                "defaults": dict(built.defaults),
                "state": {},
                "param_groups": [{**g, "params": []} for g in plain],
            }
        )
        return [set(after) - set(before) for after, before in zip(probe.param_groups, plain, strict=True)]
    except Exception:  # a foreign __setstate__ that needs more: only the saved keys count
        return None


def _group_problem(group: Mapping[str, Any], mine: Mapping[str, Any], filled: set[str], n: int) -> str | None:
    """A saved param group against the built one: every key the optimizer reads is there (or filled in by
    its class, as torch does), each of the built value's kind; keys the built one lacks are kept, as torch
    keeps them (an optimizer reads only its own)."""
    # param_names is optional in torch's load_state_dict: a saved group without it keeps the optimizer's (a
    # checkpoint of an optimizer built from parameters(), or by torch < 2.6, resumed with named_parameters())
    missing = sorted(set(mine) - set(group) - filled - {"params", "param_names"})
    if missing:
        extra = sorted(map(str, set(group) - set(mine)))[:4]
        held = f"holds {', '.join(extra)} and " if extra else ""
        return f"param group {n} {held}lacks {', '.join(missing[:4])}, which the config's optimizer reads"
    for key, value in mine.items():
        if key != "params" and key in group and (problem := value_problem(group[key], value, f"[{key!r}]")):
            return f"param group {n}{problem}"
    return None


def optimizer_problem(
    saved: Any, built: torch.optim.Optimizer, dry: list[list[dict[str, Any]]] | None = None
) -> str | None:
    """What in ``saved`` (an optimizer's ``state_dict()``) does not fit ``built`` (``None``: it fits)."""
    if not isinstance(saved, Mapping) or set(saved) != {"state", "param_groups"}:
        return f"holds {holds(saved)}, not an optimizer's state_dict (state, param_groups)"
    groups, built_groups = saved["param_groups"], built.state_dict()["param_groups"]
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        return "param_groups that are not a list of dicts"
    if len(groups) != len(built_groups):
        return f"{len(groups)} param groups, where the config builds {len(built_groups)}"
    ids: list[Any] = [
        i for g in groups for i in (g.get("params") if isinstance(g.get("params"), list) else [None])
    ]
    if not all(type(i) is int for i in ids) or len(set(ids)) != len(ids):
        return "param ids that are not distinct ints"
    filled = _filled_keys(groups, built)
    for n, (group, mine) in enumerate(zip(groups, built_groups, strict=True)):
        if len(group["params"]) != len(mine["params"]):
            counts = len(group["params"]), len(mine["params"])
            return f"param group {n} of {counts[0]} parameters, where the config builds {counts[1]}"
        if problem := _group_problem(group, mine, filled[n] if filled else set(), n):
            return problem
    problem, saved_dry = settings_problem(groups, built)
    if problem:
        return problem
    state = saved["state"]
    if not isinstance(state, Mapping):
        return "a per-parameter state that is not a dict"
    place = {pid: (n, j) for n, g in enumerate(groups) for j, pid in enumerate(g["params"])}
    dry = dry_state(built, steps=2) if dry is None else dry
    early = early_keys(built) if dry is not None else None
    for pid, values in state.items():
        if pid not in place:
            return f"state for param id {holds(pid)}, which no param group names"
        if dry is None:
            continue
        n, j = place[pid]
        params = built.param_groups[n]["params"]
        real, stand = tuple(params[j].shape), _stand_in(params[j].shape)
        totals = (sum(math.prod(_stand_in(p.shape)) for p in params), sum(p.numel() for p in params))
        nones = saved_dry[n][j] if saved_dry else {}
        known = early[n][j] if early else None
        if problem := _state_problem(values, dry[n][j], real, stand, totals, f"state[{pid}]", nones, known):
            return problem
    return first_step_problem(saved, built)


# ---- the scheduler --------------------------------------------------------------------------------------
_PROGRESS_ARGS = frozenset({"optimizer", "last_epoch", "verbose"})


def _settings(scheduler: Any) -> frozenset[str]:
    """The ``__init__`` parameters ``scheduler`` keeps under their own names (its settings, not progress)."""
    try:
        names = inspect.signature(type(scheduler).__init__).parameters
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(names) - _PROGRESS_ARGS


def scheduler_problem(saved: Any, built: Any, steps: bool = True) -> str | None:
    """What in ``saved`` (a scheduler's ``state_dict()``) does not fit ``built`` (``None``: it fits).

    ``steps``: whether the fit will step it; a fit that takes no step (a finished run resumed with its own
    ``max_steps``) does not run its first step, so that step is not probed (a ``OneCycleLR`` at its
    ``total_steps`` cannot step again, and need not)."""
    mine = built.state_dict()
    if not isinstance(saved, Mapping):
        return f"holds {holds(saved)}, not a scheduler's state_dict"
    if problem := keys_problem(saved, mine, type(built).__name__):
        return problem
    for key in sorted(_settings(built) & set(mine)):
        if saved[key] != mine[key] and not (_is_nan(saved[key]) and _is_nan(mine[key])):
            name = type(built).__name__
            return f"{key}={holds(saved[key])}, where the config's {name} has {key}={holds(mine[key])}"
    for child_saved, child in scheduler_children(saved, built):  # SequentialLR's, ChainedScheduler's
        if problem := scheduler_problem(child_saved, child, steps):
            return problem
    return step_problem(saved, built) if steps else None


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


# ---- all of a fit's -------------------------------------------------------------------------------------
def check_optimizers(
    checkpoint: Any, optimizers: Sequence[Any], schedulers: Sequence[Any], what: str, steps: bool = True
) -> None:
    """Raise :class:`ContractError` (one line) where ``checkpoint``'s optimizer or scheduler states do not fit
    ``optimizers`` and ``schedulers`` (what the config built, in Lightning's order); ``steps``: whether the
    fit will take an optimizer step (:func:`scheduler_problem`)."""
    saved_optimizers = checkpoint.get("optimizer_states", [])
    saved_schedulers = checkpoint.get("lr_schedulers", [])
    held = built = problem = ""
    if not isinstance(saved_optimizers, list) or len(saved_optimizers) != len(optimizers):
        count = len(saved_optimizers) if isinstance(saved_optimizers, list) else holds(saved_optimizers)
        held, built = f"{count} optimizer states", f"{len(optimizers)} optimizers"
    elif not isinstance(saved_schedulers, list) or len(saved_schedulers) != len(schedulers):
        count = len(saved_schedulers) if isinstance(saved_schedulers, list) else holds(saved_schedulers)
        held, built = f"{count} scheduler states", f"{len(schedulers)} schedulers"
    else:
        for saved, optimizer in zip(saved_optimizers, optimizers, strict=True):
            if problem := optimizer_problem(saved, optimizer) or "":
                held, built = f"the state of {saved_optimizer_name(saved)}", type(optimizer).__name__
                break
        else:
            for saved, scheduler in zip(saved_schedulers, schedulers, strict=True):
                if problem := scheduler_problem(saved, scheduler, steps) or "":
                    held, built = "a scheduler state", type(scheduler).__name__
                    break
    if held:
        raise ContractError(
            messages.OPTIMIZER_CHANGED.format(
                what=what, held=held, built=built, problem=messages.shown(problem, limit=200)
            )
        )
