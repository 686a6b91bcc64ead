"""Callbacks the ``lit-gpu`` CLI turns on by default; usable with any Lightning Trainer."""

from lit_gpu import strategies as _strategies  # noqa: F401  (registers Trainer(strategy="dp"))
from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.interrupt import CheckpointOnInterrupt
from lit_gpu.callbacks.logging_state import LoggingStateCallback
from lit_gpu.callbacks.nan_guard import NaNGuard, NonFiniteLossError
from lit_gpu.callbacks.oom_recovery import OOMRecovery
from lit_gpu.callbacks.prediction_writer import CSVPredictionWriter
from lit_gpu.callbacks.rng_state import RNGStateCallback

__all__ = [
    "CSVPredictionWriter",
    "CheckpointOnInterrupt",
    "FreshLastCheckpoint",
    "LoggingStateCallback",
    "NaNGuard",
    "NonFiniteLossError",
    "OOMRecovery",
    "RNGStateCallback",
]
