"""PyTorch's CUDA allocator for a run: expandable segments on while a run recovers from out of memory.

:class:`~lit_gpu.callbacks.oom_recovery.OOMRecovery` turns them on at setup on a GPU and off at teardown.
Without them a small allocation that lives on (likely cuBLAS' workspace, made in a retried step's first
backward) can land in a freed multi-GiB block and pin it, and the retry needs one more halving than the
memory requires. The user's own ``PYTORCH_CUDA_ALLOC_CONF`` (or ``PYTORCH_ALLOC_CONF``) always wins.
"""

from __future__ import annotations

import os

from lit_gpu.upstream.torch_hooks import set_allocator_settings

__all__ = ["ALLOC_CONF_ENV", "set_expandable_segments"]

ALLOC_CONF_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _set_allocator_settings(settings: str) -> None:
    """PyTorch's runtime allocator setting (private, pinned): torch >= 2.9's name, else the older one."""
    set_allocator_settings(settings)


def set_expandable_segments(on: bool) -> bool:
    """Turn the CUDA allocator's expandable segments on or off, unless the user's environment sets them.

    Blocks allocated afterwards come from segments that grow and shrink by pages, so a freed block
    cannot be pinned by a small allocation placed in it. Returns whether the setting was changed.
    """
    if any("expandable_segments" in os.environ.get(name, "") for name in ALLOC_CONF_ENV):
        return False  # the user's own choice
    _set_allocator_settings(f"expandable_segments:{on}")
    return True
