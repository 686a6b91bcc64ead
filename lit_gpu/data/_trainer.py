"""What a data module reads of the trainer it is attached to (none attached: one process, no GPU)."""

from __future__ import annotations

from typing import Any

from lit_gpu.devices import on_cuda


def rank_and_world(trainer: Any) -> tuple[int, int]:
    """``(global_rank, world_size)`` of ``trainer``; ``(0, 1)`` without one."""
    return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)


def use_pin_memory(pin_memory: bool | None, trainer: Any) -> bool:
    """``pin_memory`` as set, or (``None``) whether ``trainer`` trains on CUDA."""
    return pin_memory if pin_memory is not None else on_cuda(trainer)
