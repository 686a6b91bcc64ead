"""The contracts of Lightning's own callbacks, which a config may add (``EarlyStopping``, ``ModelCheckpoint``,
``Timer``): Lightning restores their state as saved (``self.patience = state_dict["patience"]``), so a forged
one fails at the next check with a traceback (a str patience, an unknown stopping reason) or changes what
the fit does. :func:`callback_contracts` declares them for the callbacks of a fit that declare none
themselves; ``FreshLastCheckpoint`` declares :func:`model_checkpoint_state` as its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from lit_gpu.files import contracts as c

__all__ = ["callback_contracts", "model_checkpoint_state"]


def model_checkpoint_state() -> c.Spec:
    """ModelCheckpoint's state: paths are strings, scores finite-or-inf scalar tensors, best_k a dict."""
    score = c.optional(c.tensor((), dtypes="float"))
    path = c.optional(c.text())
    best_k = c.checked(
        "a dict of str paths to scalar float tensors",
        lambda v: (
            None
            if isinstance(v, dict)
            and all(isinstance(k, str) and score.problem(s) is None for k, s in v.items())
            else ""
        ),
    )
    return c.fields(
        {
            "monitor": c.optional(c.text()),
            "best_model_score": score,
            "best_model_path": path,
            "current_score": score,
            "dirpath": path,
            "best_k_models": best_k,
            "kth_best_model_path": path,
            "kth_value": score,
            "last_model_path": path,
        }
    )


def _early_stopping_state() -> c.Spec:
    """EarlyStopping's state: counts, a scalar best score (inf at first), a known stopping reason."""
    from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

    count = c.integer(0)  # up to 2**62
    reasons = {reason.value for reason in EarlyStoppingReason}
    return c.fields(
        {
            "wait_count": count,
            "stopped_epoch": count,
            "best_score": c.tensor((), dtypes="float"),
            "patience": count,
            "stopping_reason": c.checked(
                f"one of {sorted(reasons)}", lambda v: None if type(v) is int and v in reasons else ""
            ),
            "stopping_reason_message": c.optional(c.text()),
        },
        required=("wait_count", "stopped_epoch", "best_score", "patience"),  # read as state_dict[key]
    )


def _elapsed(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return ""
    for stage, seconds in value.items():
        if not isinstance(stage, str) or type(seconds) not in (int, float) or not math.isfinite(seconds):
            return f"{c.holds(stage)}: {c.holds(seconds)}"
        if not 0 <= seconds <= 1e12:
            return f"{c.holds(stage)}: {c.holds(seconds)}, not seconds >= 0"
    return None


def _timer_state() -> c.Spec:
    """Timer's state: seconds elapsed in each stage (the fit stops when they reach its duration)."""
    return c.fields({"time_elapsed": c.checked("a dict of stage names to seconds >= 0", _elapsed)})


def callback_contracts(owners: Iterable[Any]) -> list[c.Contract]:
    """The contracts of the Lightning callbacks among ``owners`` that declare none of their own."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, Timer

    specs = (
        (EarlyStopping, _early_stopping_state),
        (ModelCheckpoint, model_checkpoint_state),
        (Timer, _timer_state),
    )
    found = []
    for owner in owners:
        if callable(getattr(owner, "restore_contract", None)):
            continue
        for kind, spec in specs:
            if isinstance(owner, kind):
                found.append(c.Contract(("callbacks", owner.state_key), spec(), owner=type(owner).__name__))
    return found
