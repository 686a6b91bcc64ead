"""Moved to :mod:`lit_gpu.upstream.step_graph` (the one room that reaches into Lightning).

Importable here too: configs written before the move (``lit_gpu.callbacks.step_graph...``) still load."""

from lit_gpu.upstream.step_graph import *  # noqa: F403
from lit_gpu.upstream.step_graph import __all__  # noqa: F401
