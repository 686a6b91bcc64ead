"""The gradient scaler's state in a checkpoint (``precision: 16-mixed``), checked before its restore.

Lightning saves ``MixedPrecision.state_dict()`` (``FSDPPrecision``'s alike; ``native_amp_scaling_state`` in
older checkpoints): ``torch.amp.GradScaler.state_dict()``, whose keys its docstring lists (``scale``,
``growth_factor``, ``backoff_factor``, ``growth_interval``, ``_growth_tracker``), and restores it with
``GradScaler.load_state_dict``, which takes each value as it is: a ``scale`` that is a string ends in a
traceback at ``fill_``, a ``scale`` of NaN, 0 or inf makes every scaled gradient non-finite and every step
is skipped, silently, from then on. The accepted set is what ``GradScaler`` itself accepts: its ``__init__``'s
checks (``growth_factor > 1``, ``backoff_factor < 1``), a positive finite scale (what ``get_scale`` can
return), a positive growth interval and a tracker count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from lit_gpu.files.contracts import holds

__all__ = ["SCALER_KEYS", "SCALER_STATE_KEYS", "scaler_problem"]

#: where Lightning keeps the scaler's state: the precision plugins' qualnames, and the pre-2.0 key
SCALER_STATE_KEYS = ("MixedPrecision", "FSDPPrecision", "native_amp_scaling_state")
SCALER_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
_MAX_INT = 2**62


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def scaler_problem(state: Any) -> str | None:
    """What in ``state`` a ``GradScaler`` does not take (``None``: it fits)."""
    if not isinstance(state, Mapping) or set(state) != set(SCALER_KEYS):
        return f"holds {holds(state)}, not a GradScaler's state_dict ({', '.join(SCALER_KEYS)})"
    scale, growth, backoff = (_number(state[k]) for k in SCALER_KEYS[:3])
    if scale is None or not (math.isfinite(scale) and scale > 0):
        return f"scale = {holds(state['scale'])}, not a positive finite number (every step would be skipped)"
    if growth is None or not (math.isfinite(growth) and growth > 1.0):
        return f"growth_factor = {holds(state['growth_factor'])}; GradScaler takes a finite number > 1.0"
    if backoff is None or not (0.0 < backoff < 1.0):
        return f"backoff_factor = {holds(state['backoff_factor'])}; GradScaler takes a number in (0, 1)"
    for key, low in (("growth_interval", 1), ("_growth_tracker", 0)):
        value = state[key]
        if type(value) is not int or not low <= value <= _MAX_INT:
            return f"{key} = {holds(value)}, not a count in [{low}, 2**62]"
    return None
