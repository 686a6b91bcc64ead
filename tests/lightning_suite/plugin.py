"""pytest plugin: every ``lightning.pytorch.Trainer`` a test builds gets the callbacks ``lit-gpu`` adds.

Loaded into *Lightning's own* test suite by ``.ci/lightning_tests`` (``-p tests.lightning_suite.plugin``), so
Lightning's tests judge whether Lightning still behaves as Lightning with lit_gpu's defaults in the
Trainer: :data:`lit_gpu.cli.lightning_cli.DEFAULT_CALLBACKS`, ``SpeedLevers()`` and ``NaNGuard()``, as
``lit-gpu fit`` configures them (issue 39). Set ``LIT_GPU_PLUGIN_OFF=1`` to load it and change nothing.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest


def default_callbacks() -> list[Any]:
    """Fresh instances of what the ``lit-gpu`` CLI puts in every Trainer."""
    from lit_gpu.callbacks.nan_guard import NaNGuard
    from lit_gpu.callbacks.speed import SpeedLevers
    from lit_gpu.cli.lightning_cli import DEFAULT_CALLBACKS

    return [cls() for cls in DEFAULT_CALLBACKS] + [SpeedLevers(), NaNGuard()]


def _with_defaults(init: Any) -> Any:
    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        callbacks = kwargs.get("callbacks")
        if callbacks is None:
            callbacks = []
        elif not isinstance(callbacks, list):
            callbacks = [callbacks]
        kwargs["callbacks"] = [*callbacks, *default_callbacks()]
        init(self, *args, **kwargs)

    __init__._lit_gpu_defaults = True  # type: ignore[attr-defined]
    return __init__


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("LIT_GPU_PLUGIN_OFF") == "1":
        return
    from lightning.pytorch import Trainer

    if not getattr(Trainer.__init__, "_lit_gpu_defaults", False):
        Trainer.__init__ = _with_defaults(Trainer.__init__)  # type: ignore[method-assign]
    config.addinivalue_line(
        "markers", "lit_gpu_defaults: Lightning's test ran with lit_gpu's default callbacks"
    )


def pytest_report_header(config: pytest.Config) -> str:
    on = os.environ.get("LIT_GPU_PLUGIN_OFF") != "1"
    return f"lit_gpu plugin: {'every Trainer gets lit_gpu default callbacks' if on else 'loaded, off'}"
