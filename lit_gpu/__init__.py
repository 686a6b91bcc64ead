"""lit_gpu: config-driven GPU training recipes on PyTorch Lightning 2.x.

``import lit_gpu`` imports neither torch nor Lightning: ``lit-gpu --help``, ``configs`` and ``init``
answer at once. Its subpackages are attributes loaded on first use (``lit_gpu.modules``,
``lit_gpu.nets``...). It changes no warning or logging filter (the ``lit-gpu`` CLI quiets upstream
chatter in :func:`lit_gpu.cli.main`).

``Trainer(strategy="dp")`` works once :mod:`lit_gpu.strategies` is imported (it registers ``dp`` in
Lightning's strategy registry); LitGpuCLI, :mod:`lit_gpu.modules` and :mod:`lit_gpu.callbacks` import it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lit_gpu.errors import LitGpuError

if TYPE_CHECKING:
    from lit_gpu import callbacks, cli, data, modules, nets, strategies  # noqa: F401

__version__ = "0.1.0"

#: lit_gpu's modules and subpackages, each an attribute imported on first use (PEP 562)
SUBMODULES = frozenset(
    {
        "callbacks", "checkpoints", "cli", "commands", "data", "demo", "devices", "errors",
        "messages", "modules", "nets", "fastpath", "oom", "textfiles", "run", "strategies",
        "explain", "preemption", "resume", "upstream",
    }
)  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *SUBMODULES})


__all__ = ["LitGpuError", "__version__"]
