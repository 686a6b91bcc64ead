"""What a plain ``DataLoader``'s sample order depends on: recorded with its replay state, compared on resume.

A replay (:mod:`lit_gpu.data.replay`) puts back the generators' states of the saved epoch; the order they draw
is the saved one only when the loader around them is the saved one. :func:`order_settings` records each
setting the order depends on: the dataset's length, the batch size and ``drop_last``, the sampler's class
and settings (shuffle, replacement, its generator's seed or ``DistributedSampler``'s seed), the loader's
generator, ``num_workers`` and ``persistent_workers`` (the workers' base seed is drawn from the global RNG
or the loader's generator when an iterator is made), and the world size. :func:`changed_settings` names
those that differ on resume (``None``: the loader is the saved one).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

__all__ = ["ORDER_KEYS", "changed_settings", "check_order_settings", "order_settings"]

#: the recorded settings and the types each may have (the restored state's contract: nothing else is taken)
ORDER_KEYS: dict[str, tuple[type, ...]] = {
    "samples": (int,),
    "batch_size": (int, type(None)),
    "drop_last": (bool,),
    "sampler": (str,),
    "shuffle": (bool,),
    "replacement": (bool,),
    "sampler_seed": (int, type(None)),
    "loader_seed": (int, type(None)),
    "num_workers": (int,),
    "persistent_workers": (bool,),
    "world_size": (int,),
}
_INT_RANGE = (-(2**63), 2**64 - 1)  # a torch seed (initial_seed is unsigned 64-bit), a length, a count
_NAME_MAX = 200


def _seed(generator: torch.Generator | None) -> int | None:
    return None if generator is None else int(generator.initial_seed())


def _world_size(sampler: Any) -> int:
    if isinstance(sampler, DistributedSampler):
        return int(sampler.num_replicas)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    return 1


def order_settings(loader: DataLoader, sampler: Any) -> dict[str, Any]:
    """The settings of ``loader`` (whose index sampler is ``sampler``) that its sample order depends on."""
    batch_sampler = loader.batch_sampler
    random = isinstance(sampler, RandomSampler)
    if random:
        sampler_seed = _seed(sampler.generator)
    else:
        sampler_seed = int(sampler.seed) if isinstance(sampler, DistributedSampler) else None
    return {
        "samples": len(loader.dataset),  # type: ignore[arg-type]
        "batch_size": None if batch_sampler is None else int(batch_sampler.batch_size),  # type: ignore[attr-defined]
        "drop_last": bool(batch_sampler.drop_last) if batch_sampler is not None else False,  # type: ignore[attr-defined]
        "sampler": type(sampler).__name__,
        "shuffle": random or bool(getattr(sampler, "shuffle", False)),
        "replacement": bool(getattr(sampler, "replacement", False)),
        "sampler_seed": sampler_seed,
        "loader_seed": _seed(loader.generator),
        "num_workers": int(loader.num_workers),
        "persistent_workers": bool(loader.persistent_workers),
        "world_size": _world_size(sampler),
    }


def check_order_settings(settings: Any) -> str | None:
    """What is wrong with recorded ``settings`` read from a checkpoint (``None``: nothing)."""
    if not isinstance(settings, dict) or set(settings) != set(ORDER_KEYS):
        return "its loader settings are not the keys " + ", ".join(ORDER_KEYS)
    for key, types in ORDER_KEYS.items():
        value = settings[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"its loader setting {key} is a {type(value).__name__}"
        low, high = _INT_RANGE
        if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
            return f"its loader setting {key} is out of range"
        if isinstance(value, str) and len(value) > _NAME_MAX:
            return f"its loader setting {key} is longer than {_NAME_MAX} characters"
    return None


def changed_settings(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """``batch_size 8 -> 9, samples 64 -> 63``: the settings that differ (``None``: none does)."""
    from lit_gpu.messages import shown

    changes = [
        f"{key} {shown(saved[key], limit=60)} -> {shown(now[key], limit=60)}"
        for key in ORDER_KEYS
        if saved.get(key) != now.get(key)
    ]
    return ", ".join(changes) or None
