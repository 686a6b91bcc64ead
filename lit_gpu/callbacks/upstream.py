"""Moved to :mod:`lit_gpu.upstream` (the one room that reaches into Lightning); importable here too."""

from lit_gpu.upstream import *  # noqa: F403
from lit_gpu.upstream import __all__  # noqa: F401
