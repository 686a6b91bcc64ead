"""Save and restore the global RNG states in checkpoints so a resumed run draws the same numbers."""

from __future__ import annotations

import random
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override


def _capture() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all(cuda_states)


class RNGStateCallback(Callback):
    """Make resumed training bit-exact w.r.t. random numbers (shuffling, dropout, augmentation).

    Checkpoints store the torch, CUDA, numpy and Python RNG states; resuming restores them. The
    sanity-check validation run is made RNG-neutral (states are put back after it) so it consumes
    the same random numbers whether or not the run was resumed.

    Exactness holds when resuming from a checkpoint at an epoch boundary (the default per-epoch
    checkpoints). Mid-epoch checkpoints (``--checkpoint.every_n_train_steps``) restore weights and
    optimizer state, but a plain DataLoader restarts the epoch's data order.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sanity_state: dict[str, Any] | None = None

    @override
    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._sanity_state = _capture()

    @override
    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._sanity_state is not None:
            _restore(self._sanity_state)
            self._sanity_state = None

    @override
    def state_dict(self) -> dict[str, Any]:
        state = _capture()
        # plain containers only, so the checkpoint still loads with weights_only=True
        state["numpy"] = [
            state["numpy"][0],
            torch.from_numpy(state["numpy"][1].astype(np.int64)),
            *state["numpy"][2:],
        ]
        state["python"] = [state["python"][0], list(state["python"][1]), state["python"][2]]
        return state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        kind, keys, *rest = state["numpy"]
        state["numpy"] = (
            kind,
            np.asarray(keys.numpy() if isinstance(keys, torch.Tensor) else keys).astype(np.uint32),
            *rest,
        )
        version, internal, gauss = state["python"]
        state["python"] = (version, tuple(internal), gauss)
        _restore(state)
