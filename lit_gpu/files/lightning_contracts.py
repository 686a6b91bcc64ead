"""The contracts lit_gpu declares for what Lightning restores: the checkpoint's top level and the loops.

Lightning's restore reads these parts of a checkpoint without checking them: a forged type, shape or
flag ends in a traceback deep in Lightning or torch. :func:`check_restored_state` (``lit_gpu.io``) runs
them with the owners' own contracts (:mod:`lit_gpu.files.contracts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.files.contracts import _MAX_INT, EACH, Contract, checked, holds, integer
from lit_gpu.files.scaler_state import SCALER_STATE_KEYS, scaler_problem
from lit_gpu.upstream.loops import saved_batches_that_stepped, saved_loop_counters

__all__ = ["counters_problem", "lightning_contract"]


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
        # the optimizers' and schedulers' states: against the ones the config builds, once built
        # (lit_gpu.files.optimizer_fit, at the fit's start), not against a list of names
        Contract(("optimizer_states",), plain_list, owner=owner),
        Contract(("optimizer_states", EACH), plain_dict, owner="the optimizer"),
        Contract(("lr_schedulers",), plain_list, owner=owner),
        Contract(("lr_schedulers", EACH), plain_dict, owner="the learning-rate scheduler"),
        Contract(("hyper_parameters",), plain_dict, owner=owner),
        *(
            Contract(
                (key,), checked("a GradScaler's state_dict", scaler_problem), owner="the precision plugin"
            )
            for key in SCALER_STATE_KEYS
        ),
        Contract(
            (),
            checked("top-level counters equal to its loops' (where it resumes)", counters_problem),
            owner=owner,
        ),
    ]
