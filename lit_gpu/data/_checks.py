"""Checks of the loader settings every data module takes, so a bad value is one line, not a traceback."""

from __future__ import annotations

from lit_gpu import messages
from lit_gpu.errors import LitGpuError


def check_loader_args(batch_size: int, num_workers: int) -> None:
    """Raise :class:`LitGpuError` for ``batch_size < 1`` or ``num_workers < 0`` (DataLoader's ValueErrors)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise LitGpuError(
            messages.BAD_DATA_SETTING.format(
                name="batch_size", rule="a positive integer", value=batch_size, example="e.g. 64"
            )
        )
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise LitGpuError(
            messages.BAD_DATA_SETTING.format(
                name="num_workers",
                rule="0 or more",
                value=num_workers,
                example="0 (load in the main process) or the number of worker processes",
            )
        )
