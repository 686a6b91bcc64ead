"""User-facing errors: the CLI prints these as one line, without a traceback."""

from __future__ import annotations

import importlib


class LitGpuError(RuntimeError):
    """A mistake the user can fix (bad path, missing data, impossible device request...).

    The message must say what went wrong and what to do instead, in one line.
    """


# "module:function" translators: each takes an exception and returns a one-line message
# (or None when it does not recognise it). Feature modules append theirs here.
TRANSLATORS: list[str] = [
    "lit_gpu.failures:translate",  # OOM, bad checkpoints, dead DataLoader workers
    "lit_gpu.diagnostics:explain_device_error",  # GPU asked for but absent, too few GPUs
]


def explain(err: BaseException) -> str | None:
    """One-line, actionable message for a known failure, else ``None``."""
    if isinstance(err, LitGpuError):
        return str(err)
    for spec in TRANSLATORS:
        module_path, func = spec.split(":")
        message = getattr(importlib.import_module(module_path), func)(err)
        if message:
            return message
    return None
