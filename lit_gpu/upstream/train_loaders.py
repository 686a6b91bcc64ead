"""The fit loop's train loaders, before Lightning loads their saved states (Lightning internals, pinned).

Lightning saves ``state_dict()`` of every train loader that has one and, on a resume, hands it back in
``_FitLoop.setup_data`` (``_load_combined_loader_states``, right after it built the loaders and before
it creates their iterator). :func:`prepare_train_loaders` lets lit_gpu turn a module's plain loaders
into stateful ones there (:func:`lit_gpu.resume.plain.make_replayable`); it is an instance attribute on
this fit's loop, removed by :func:`release_train_loaders`. Pinned by
test_fit_loop__setup_data__load_combined_loader_states in tests/unit/test_upstream_pins.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.fabric.utilities.types import _Stateful
from torch.utils.data import DataLoader

_HOOK = "_load_combined_loader_states"


def prepare_train_loaders(
    fit_loop: Any, prepare: Callable[[list[Any]], Any], ours: Callable[[Any], bool] | None = None
) -> None:
    """Call ``prepare(loaders)`` on this fit's train loaders whenever Lightning is to load their states.

    Lightning loads the saved states only when its fit loop is ``restarting``, which it is not when the
    checkpoint's epoch counters say the epoch finished: a save at an epoch's end, and any save of a fit
    resumed from one (Lightning 2.6 leaves the next epoch's counters as they were). The loaders for which
    ``ours(loader)`` holds get their states then too (they tell an epoch's start from its middle themselves).
    """
    load = getattr(type(fit_loop), _HOOK).__get__(fit_loop)

    def prepared_then_loaded() -> None:
        combined = fit_loop._combined_loader
        if combined is not None:
            prepare(combined.flattened)
            states = fit_loop._combined_loader_states_to_load
            if states and ours is not None and not fit_loop.restarting:
                stateful = [ld for ld in combined.flattened if isinstance(ld, _Stateful)]
                pairs = zip(stateful, states, strict=True) if len(stateful) == len(states) else ()
                for loader, state in pairs:
                    if ours(loader):
                        loader.load_state_dict(state)
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


class SeededIterators(DataLoader):
    """A ``DataLoader`` whose next iterator can draw its workers' base seed from a given generator state.

    torch's ``DataLoader`` makes each iterator in ``_get_iterator`` (private), which draws the workers' base
    seed from ``loader.generator`` or, without one, from the global torch RNG; a persistent-workers loader
    makes one iterator and resets it each epoch (``_iterator``, private). A resumed loader whose uninterrupted
    run had reset its iterator must not draw from the restored generators, and its workers must start from
    the base seed that run's workers had: :meth:`seed_next_iterator_from` gives it the generator state that
    seed was drawn from. Pinned by the replay tests (tests/unit/resume/test_replay.py).
    """

    _seed_from: bytes | None = None

    def seed_next_iterator_from(self, state: bytes | None) -> None:
        """The next iterator draws its base seed from a generator in ``state`` (``None``: as torch does)."""
        self._seed_from = state

    @property
    def has_iterator(self) -> bool:
        """Whether a persistent-workers iterator exists already (the next pass resets it, drawing nothing)."""
        return getattr(self, "_iterator", None) is not None

    def _get_iterator(self) -> Any:
        state, self._seed_from = self._seed_from, None
        make = super()._get_iterator
        if state is None:
            return make()
        import torch

        generator = torch.Generator()
        generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        own = self.generator
        self.generator = generator
        try:
            return make()
        finally:
            self.generator = own
