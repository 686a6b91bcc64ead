"""Callbacks the ``lit-gpu`` CLI turns on by default; usable with any Lightning Trainer.

These are the public names a run's ``config.yaml`` records (``lit_gpu.callbacks.LeanOptimizerStep``), so
the files that define them can move; ``config.yaml`` files written before name the modules they lived in,
which :mod:`lit_gpu.run.class_paths` (one table) maps to these names when a config is parsed.
"""

from lit_gpu import strategies as _strategies  # noqa: F401  (registers Trainer(strategy="dp"))
from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.guarantees import GUARANTEES, guarantee_callbacks
from lit_gpu.callbacks.interrupt import CheckpointOnInterrupt
from lit_gpu.callbacks.logging_state import LoggingStateCallback
from lit_gpu.callbacks.nan_guard import NaNGuard, NonFiniteLossError
from lit_gpu.callbacks.prediction_writer import CSVPredictionWriter
from lit_gpu.callbacks.rng_state import RNGStateCallback
from lit_gpu.loggers import RunFolderSync
from lit_gpu.oom.recovery import OOMLoopName, OOMRecovery
from lit_gpu.upstream.batch_path import LeanTrainingBatch
from lit_gpu.upstream.step_path import LeanOptimizerStep, SkipIdleHooks

__all__ = [
    "CSVPredictionWriter",
    "CheckpointOnInterrupt",
    "FreshLastCheckpoint",
    "GUARANTEES",
    "LoggingStateCallback",
    "LeanOptimizerStep",
    "LeanTrainingBatch",
    "NaNGuard",
    "NonFiniteLossError",
    "OOMLoopName",
    "OOMRecovery",
    "RNGStateCallback",
    "RunFolderSync",
    "SkipIdleHooks",
    "guarantee_callbacks",
]
