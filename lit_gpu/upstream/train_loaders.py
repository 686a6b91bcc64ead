"""The fit loop's train loaders, before Lightning loads their saved states (Lightning internals, pinned).

Lightning saves ``state_dict()`` of every train loader that has one and, on a resume, hands it back in
``_FitLoop.setup_data`` (``_load_combined_loader_states``, right after it built the loaders and before
it creates their iterator). :func:`prepare_train_loaders` lets lit_gpu turn a module's plain loaders
into stateful ones there (:func:`lit_gpu.data.replay.make_replayable`); it is an instance attribute on
this fit's loop, removed by :func:`release_train_loaders`. Pinned by
test_fit_loop__setup_data__load_combined_loader_states in tests/unit/test_upstream_pins.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_HOOK = "_load_combined_loader_states"


def prepare_train_loaders(fit_loop: Any, prepare: Callable[[list[Any]], Any]) -> None:
    """Call ``prepare(loaders)`` on this fit's train loaders whenever Lightning is to load their states."""
    load = getattr(type(fit_loop), _HOOK).__get__(fit_loop)

    def prepared_then_loaded() -> None:
        combined = fit_loop._combined_loader
        if combined is not None:
            prepare(combined.flattened)
        load()

    setattr(fit_loop, _HOOK, prepared_then_loaded)


def release_train_loaders(fit_loop: Any) -> None:
    """Undo :func:`prepare_train_loaders` (the loop's own method again)."""
    vars(fit_loop).pop(_HOOK, None)


def train_loaders(trainer: Any) -> list[Any]:
    """This fit's train loaders as Lightning iterates them ([] before they are built)."""
    combined = trainer.fit_loop._combined_loader
    return [] if combined is None else list(combined.flattened)


def skip_batches(iterator: Any, batches: int, workers: int) -> None:
    """Advance a fresh DataLoader iterator by ``batches`` batches: by index without workers (torch's private
    ``_sampler_iter`` and ``_num_yielded``: nothing is loaded, and the main process's random streams are the
    checkpoint's anyway), by fetching with workers (each worker's random stream advances as it did)."""
    sampler_iter = getattr(iterator, "_sampler_iter", None)
    if workers == 0 and sampler_iter is not None and hasattr(iterator, "_num_yielded"):
        for _ in range(batches):
            next(sampler_iter)
        iterator._num_yielded += batches
        return
    for _ in range(batches):
        next(iterator)
