"""torch's private hooks lit_gpu uses: the DataLoader's worker start and SIGCHLD handler, the allocator
setting, the weights-only unpickler's rebuild functions. Each is pinned in tests/unit/test_upstream_pins.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def install_dataloader_sigchld_handler() -> None:
    """Install torch's DataLoader SIGCHLD handler now (what the first loader with workers does; once per
    process): ``torch.utils.data._utils.signal_handling._set_SIGCHLD_handler``."""
    from torch.utils.data._utils import signal_handling

    signal_handling._set_SIGCHLD_handler()


def worker_start_hook(loader: Any) -> Callable[[Any], Any] | None:
    """The class's ``DataLoader._get_iterator`` (which starts the workers), or None if it has none."""
    found = getattr(type(loader), "_get_iterator", None)
    return found if callable(found) else None


def has_own_worker_start(loader: Any) -> bool:
    """Whether ``loader`` has its own ``_get_iterator`` (set on the instance)."""
    return "_get_iterator" in vars(loader)


def set_worker_start(loader: Any, start: Callable[[], Any]) -> None:
    """Make ``loader`` start its workers through ``start`` (an instance ``_get_iterator``)."""
    loader._get_iterator = start


def set_allocator_settings(settings: str) -> None:
    """PyTorch's runtime allocator setting: torch >= 2.9's ``torch._C._accelerator_setAllocatorSettings``,
    else ``torch.cuda.memory._set_allocator_settings``."""
    import torch

    from lit_gpu.upstream.gate import stands_aside

    if stands_aside("allocator setting"):  # aside: the allocator keeps its setting
        return
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        setter = torch.cuda.memory._set_allocator_settings
    setter(settings)


def unpickler_rebuild_names() -> set[str]:
    """The ``torch._utils._rebuild_*`` functions a tensor's pickle names (for the weights-only check)."""
    import torch

    return {f"torch._utils.{n}" for n in vars(torch._utils) if n.startswith("_rebuild_")}


def has_scheduler_children(scheduler: Any) -> bool:
    """Whether ``scheduler`` is a scheduler of schedulers (``SequentialLR``, ``ChainedScheduler``: torch keeps
    them in ``_schedulers``), whichever way the gate reads their states."""
    return getattr(scheduler, "_schedulers", None) is not None


def scheduler_children(saved: Any, scheduler: Any) -> list[tuple[Any, Any]]:
    """``(saved state, scheduler)`` of each child of a ``SequentialLR`` or ``ChainedScheduler`` (torch keeps
    them in ``_schedulers``, and their states under that key of its ``state_dict``); ``[]`` for others."""
    from lit_gpu.upstream.gate import stands_aside

    if stands_aside("scheduler children"):  # aside: the children's states are checked by kind only
        return []
    children = getattr(scheduler, "_schedulers", None)
    states = saved.get("_schedulers") if isinstance(saved, dict) else None
    if not (isinstance(children, list) and isinstance(states, list)):
        return []
    return list(zip(states, children, strict=False))


__all__ = [
    "has_own_worker_start",
    "has_scheduler_children",
    "scheduler_children",
    "install_dataloader_sigchld_handler",
    "set_allocator_settings",
    "set_worker_start",
    "unpickler_rebuild_names",
    "worker_start_hook",
]
