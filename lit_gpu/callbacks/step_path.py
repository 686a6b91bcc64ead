"""Moved to :mod:`lit_gpu.upstream.step_path` (the one room that reaches into Lightning).

Importable here too: configs written before the move (``lit_gpu.callbacks.step_path...``) still load."""

from lit_gpu.upstream.step_path import *  # noqa: F403
from lit_gpu.upstream.step_path import __all__  # noqa: F401
