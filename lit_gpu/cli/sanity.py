"""Settings Lightning would refuse deep inside a run, refused in one line before it starts."""

from __future__ import annotations

from typing import Any

from lit_gpu.errors import LitGpuError
from lit_gpu.run.layout import config_value

__all__ = ["BAD_SEED", "check_seed"]

BAD_SEED = (
    "seed_everything: {seed!r} is out of range, the seed must be an integer from 0 to 4294967295 "
    "(or true for a random one, false for none); set --seed_everything (or seed_everything: in your config)"
)


def check_seed(config: Any) -> None:
    """Refuse a ``seed_everything`` Lightning's ``seed_everything`` would raise a ValueError for."""
    sub = config_value(config, "subcommand")
    seed = config_value(config, f"{sub}.seed_everything" if sub else "seed_everything")
    if seed is None or isinstance(seed, bool):
        return
    if not isinstance(seed, int) or not 0 <= seed <= 2**32 - 1:
        raise LitGpuError(BAD_SEED.format(seed=seed))
