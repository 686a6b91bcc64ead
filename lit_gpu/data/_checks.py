"""Checks of the loader settings every data module takes, so a bad value is one line, not a traceback."""

from __future__ import annotations

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import host_memory_bytes, human_bytes


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


def check_counts(**counts: tuple[object, int]) -> None:
    """Raise :class:`LitGpuError` for a size that is not an integer ``>= minimum`` (``name=(value, min)``).

    ``out_features: null`` or ``num_samples: -5`` in a config would otherwise fail deep inside torch.
    """
    for name, (value, minimum) in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise LitGpuError(
                messages.BAD_DATA_SETTING.format(name=name, rule=rule, value=value, example="e.g. 10")
            )


def check_number(name: str, value: object, minimum: float = 0.0) -> None:
    """Raise :class:`LitGpuError` for a setting that is not a finite number ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value < float("inf"):
        raise LitGpuError(
            messages.BAD_DATA_SETTING.format(
                name=name, rule=f"a finite number >= {minimum:g}", value=value, example="e.g. 0.05"
            )
        )


DATA_TOO_BIG = (
    "{settings}: the data's tensors would need {needs}, more than this machine's {have} of memory; "
    "make data.{largest} smaller (--data.{largest}, or {largest}: in your config)"
)


def check_fits_in_memory(sizes: dict[str, int], needs: int) -> None:
    """Refuse data sizes whose tensors (``needs`` bytes) cannot fit in this machine's memory at all.

    Checked before anything is allocated: torch's allocator would otherwise fail with a traceback
    (or, where the kernel overcommits, the process would be killed while filling the tensors).
    ``sizes`` are the settings that decide ``needs``; the largest is named as the one to change.
    """
    have = host_memory_bytes()
    if have is None or needs <= have:
        return
    settings = ", ".join(f"data.{name}={value}" for name, value in sizes.items())
    largest = max(sizes, key=lambda name: sizes[name])
    raise LitGpuError(
        DATA_TOO_BIG.format(
            settings=settings, needs=human_bytes(needs), have=human_bytes(have), largest=largest
        )
    )
