"""Kinds of values in a saved optimizer or scheduler state, compared with the values the config builds.

A restore uses a value by its kind, not its exact type: a 0-dim tensor and a number are both a scalar (torch
turns a saved number ``step`` into a tensor; LBFGS keeps ``H_diag`` as either; numpy's numbers are numbers),
lists and dicts are compared item by item. :func:`value_problem` says what in a saved value is not of the
kind of the built one (used by :mod:`lit_gpu.files.optimizer_fit`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import torch

from lit_gpu.files.contracts import holds

__all__ = ["MAX_INT", "keys_problem", "kind", "value_problem"]

MAX_INT = 2**62


# ---- kinds ------------------------------------------------------------------------------------
def kind(value: Any) -> str:
    """A value's kind as a restore uses it: a 0-dim tensor and a number are both a scalar (torch turns a
    saved number ``step`` into a tensor; LBFGS keeps ``H_diag`` as either)."""
    if isinstance(value, torch.Tensor):
        return "a scalar" if value.dim() == 0 else f"a {value.dim()}-dim tensor"
    if value is None:
        return "None"
    if isinstance(value, bool) or type(value).__name__ == "bool":  # numpy.bool
        return "a bool"
    if isinstance(value, numbers.Real):  # int, float and numpy's numbers (np.cos in a schedule)
        return "a scalar"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a dict"
    if isinstance(value, str):
        return "a str"
    return type(value).__name__


def _number_problem(saved: Any, built: Any, name: str) -> str | None:
    """A saved scalar where the built one is: finite where the built one is, not NaN where it is not (an
    infinite one may be: ``ReduceLROnPlateau``'s ``best`` starts at ``inf``); torch's scheduler counters
    (``LRScheduler.last_epoch`` >= -1, ``_step_count`` >= 0) in range."""
    if isinstance(saved, torch.Tensor):
        if saved.is_meta or saved.is_complex() or saved.dtype == torch.bool:
            return f"{name} = {holds(saved)}, not a number"
        saved = saved.item()
    counter = name.endswith(("'last_epoch']", "'_step_count']"))
    if counter and not isinstance(saved, int):
        return f"{name} = {holds(saved)}, not a count"
    if isinstance(saved, int):
        low = -1 if name.endswith("'last_epoch']") else 0 if counter else -MAX_INT
        if not low <= saved <= MAX_INT:
            return f"{name} = {holds(saved)}, where the config builds {holds(built)}"
        return None
    if isinstance(built, torch.Tensor) and built.is_meta:
        return None
    mine, held = float(built), float(saved)
    if math.isfinite(mine) and not math.isfinite(held):
        return f"{name} = {holds(saved)}, not a finite number"
    if math.isnan(held) and not math.isnan(mine):  # ReduceLROnPlateau's best: inf at first, never NaN
        return f"{name} = {holds(saved)}, not a number"
    return None


def value_problem(saved: Any, built: Any, name: str, depth: int = 0) -> str | None:
    """What in ``saved`` is not of the kind of ``built`` (recursively for lists and dicts)."""
    expected = kind(built)
    if kind(saved) != expected:
        return f"{name} is {kind(saved)}, where the config builds {expected} ({holds(built)})"
    if expected == "a scalar":
        return _number_problem(saved, built, name)
    if expected.endswith("tensor"):
        return (
            None
            if saved.dtype.is_floating_point == built.dtype.is_floating_point
            else f"{name}: {holds(saved)}"
        )
    if depth > 8:
        return f"{name} nests deeper than the config's"
    if expected == "a list":
        if len(saved) != len(built):
            return f"{name} holds {len(saved)} values, where the config builds {len(built)}"
        for i, (s, b) in enumerate(zip(saved, built, strict=True)):
            if problem := value_problem(s, b, f"{name}[{i}]", depth + 1):
                return problem
    if expected == "a dict":
        return keys_problem(saved, built, name, depth + 1)
    return None


def keys_problem(saved: Mapping[Any, Any], built: Mapping[Any, Any], name: str, depth: int = 0) -> str | None:
    if set(saved) != set(built):
        extra = sorted(map(str, set(saved) - set(built)))[:4]
        missing = sorted(map(str, set(built) - set(saved)))[:4]
        parts = ([f"holds {', '.join(extra)}"] if extra else []) + (
            [f"lacks {', '.join(missing)}"] if missing else []
        )
        return f"{name} {' and '.join(parts)}, unlike the config's"
    for key, value in built.items():
        if problem := value_problem(saved[key], value, f"{name}[{key!r}]", depth):
            return problem
    return None
