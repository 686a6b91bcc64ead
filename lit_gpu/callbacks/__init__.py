"""Callbacks the ``lit-gpu`` CLI turns on by default; usable with any Lightning Trainer.

These are the public names a run's ``config.yaml`` records (``lit_gpu.callbacks.LeanOptimizerStep``), so
the files that define them can move: each name is loaded on first use from the module :data:`PUBLIC`
names (one line to change when a file moves). ``config.yaml`` files written before name the modules they
lived in, which :mod:`lit_gpu.run.store` (one table) maps to these names when a config is parsed.
"""

from __future__ import annotations

import importlib
from typing import Any

from lit_gpu import strategies as _strategies  # noqa: F401  (registers Trainer(strategy="dp"))

#: public name -> the lit_gpu module that defines it
PUBLIC: dict[str, str] = {
    "CSVPredictionWriter": "lit_gpu.callbacks.prediction_writer",
    "CheckpointOnInterrupt": "lit_gpu.preemption",
    "FreshLastCheckpoint": "lit_gpu.callbacks.fresh_last",
    "GUARANTEES": "lit_gpu.callbacks.guarantees",
    "LeanOptimizerStep": "lit_gpu.fastpath.step",
    "LeanTrainingBatch": "lit_gpu.fastpath.batch",
    "LoggingStateCallback": "lit_gpu.resume.state",
    "NaNGuard": "lit_gpu.callbacks.nan_guard",
    "NonFiniteLossError": "lit_gpu.callbacks.nan_guard",
    "OOMLoopName": "lit_gpu.callbacks.oom_recovery",
    "OOMRecovery": "lit_gpu.callbacks.oom_recovery",
    "RNGStateCallback": "lit_gpu.resume.state",
    "RunFolderSync": "lit_gpu.run.loggers",
    "SkipIdleHooks": "lit_gpu.fastpath.hooks",
    "guarantee_callbacks": "lit_gpu.callbacks.guarantees",
}


def __getattr__(name: str) -> Any:
    if name in PUBLIC:
        value = getattr(importlib.import_module(PUBLIC[name]), name)
        globals()[name] = value  # once: the next lookup is a plain attribute
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})


__all__ = sorted(PUBLIC)
