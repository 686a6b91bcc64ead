"""lit_gpu: config-driven GPU training recipes on PyTorch Lightning 2.x.

``import lit_gpu`` imports neither torch nor Lightning: ``lit-gpu --help``, ``configs`` and ``init``
answer at once. Its subpackages are attributes loaded on first use (``lit_gpu.modules``,
``lit_gpu.nets``...). It changes no warning or logging filter (the ``lit-gpu`` CLI quiets upstream
chatter in :func:`lit_gpu.cli.main`).

``Trainer(strategy="dp")`` is registered in Lightning's strategy registry by importing
:mod:`lit_gpu.strategies`, which :mod:`lit_gpu.modules`, :mod:`lit_gpu.callbacks` and the CLI do, and
by ``import lit_gpu`` itself when Lightning is already imported (``import lightning.pytorch as pl``
first): a registration in a registry that exists, never an import of Lightning for it.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from lit_gpu.errors import LitGpuError

if TYPE_CHECKING:
    from lit_gpu import callbacks, cli, data, modules, nets, strategies  # noqa: F401

__version__ = "0.1.0"

#: lit_gpu's modules and subpackages, each an attribute imported on first use (PEP 562)
SUBMODULES = frozenset(
    {
        "callbacks", "checkpoints", "cli", "commands", "data", "demo", "devices", "errors", "files", "io",
        "load_report", "messages", "modules", "net_spec", "nets", "profilers", "recipes", "run", "runs",
        "strategies", "testing", "translate", "upstream",
    }
)  # fmt: skip

if "lightning.pytorch" in sys.modules:  # Lightning is here already: register Trainer(strategy="dp") now
    from lit_gpu import strategies  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *SUBMODULES})


__all__ = ["LitGpuError", "__version__"]
