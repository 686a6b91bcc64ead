"""Save and restore the global RNG states in checkpoints so a resumed run draws the same numbers."""

from __future__ import annotations

import random
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lit_gpu.data.stateful import (
    batches_in_flight,
    patch_interrupted_loader_state,
    sync_resumed_train_loader,
)


def _capture() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_initialized():  # implies available; is_available() itself costs a device query
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _serializable(state: dict[str, Any]) -> dict[str, Any]:
    """Plain containers only, so the checkpoint still loads with ``weights_only=True``."""
    state = dict(state)
    state["numpy"] = [
        state["numpy"][0],
        torch.from_numpy(state["numpy"][1].astype(np.int64)),
        *state["numpy"][2:],
    ]
    state["python"] = [state["python"][0], list(state["python"][1]), state["python"][2]]
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

    Checkpoints store the torch, CUDA, numpy and Python RNG states as they are at the save point,
    which may be any training step; resuming restores them. The sanity-check validation run is
    made RNG-neutral (states are put back after it) so it consumes the same random numbers whether
    or not the run was resumed.

    At ``on_train_start`` it also makes sure a resumed fit continues at the checkpoint's sample
    with lit_gpu's resumable loaders (:func:`lit_gpu.data.stateful.sync_resumed_train_loader`:
    Lightning issue #20550, and a resume with another global batch). The sample order itself and
    the per-sample random streams of DataLoader workers are the loaders' state
    (:mod:`lit_gpu.data.stateful`), so together they resume exactly at any step.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sanity_state: dict[str, Any] | None = None
        self._step_state: dict[str, Any] | None = None

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # the states as the next step will find them: saved instead of the live ones when an
        # interrupt lands in the middle of that step (its random draws are then redone on resume)
        self._step_state = _capture()

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        in_flight = batches_in_flight(trainer)
        if not in_flight:
            return
        # interrupted mid-step: save the point where that step began, so the resume redoes it exactly
        patch_interrupted_loader_state(trainer, checkpoint, in_flight)
        if self._step_state is not None and self.state_key in checkpoint.get("callbacks", {}):
            checkpoint["callbacks"][self.state_key] = _serializable(self._step_state)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sync_resumed_train_loader(trainer)

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
        return _serializable(_capture())

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
