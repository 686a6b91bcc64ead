"""The profiler ``lit-gpu`` gives a Trainer that profiles nothing: Lightning's, without its per-hook cost.

Lightning wraps every hook call (each callback's, the module's, the strategy's) in
``trainer.profiler.profile(name)``; its default ``PassThroughProfiler`` records nothing, but its
``profile`` is a generator-based context manager, about 8 Python calls each time, some 150 times a
training step. :class:`NoProfiler` returns one shared ``nullcontext`` instead. A profiler the user
asks for (``--trainer.profiler simple``) is left as it is.
"""

from __future__ import annotations

import contextlib
from typing import Any

from lightning.pytorch.profilers import PassThroughProfiler
from typing_extensions import override

_NOTHING = contextlib.nullcontext()


class NoProfiler(PassThroughProfiler):
    """``PassThroughProfiler`` whose ``profile(name)`` costs one call: nothing is recorded either way."""

    @override
    def profile(self, action_name: str) -> Any:  # type: ignore[override]
        return _NOTHING


def skip_idle_profiler(trainer: Any) -> bool:
    """Give ``trainer`` a :class:`NoProfiler` if it has Lightning's do-nothing default; whether it did."""
    if type(trainer.profiler) is PassThroughProfiler:
        trainer.profiler = NoProfiler()
        return True
    return False
