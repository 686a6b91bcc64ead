"""Save and restore the global RNG states in checkpoints so a resumed run draws the same numbers.

Also the fit-loop surgery that exact resume needs with lit_gpu's resumable loaders
(:mod:`lit_gpu.data.stateful`): Lightning's private fit-loop attributes are read here, next to the
callback that needs them, and pinned in tests/unit/test_upstream_pins.py.
"""

from __future__ import annotations

import random
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lit_gpu.data.stateful import GlobalPosition


def _capture(host: bool = True) -> dict[str, Any]:
    """The global RNG states, through each library's public API (plain data: picklable, deep-copyable).

    ``host=False`` leaves out numpy's and Python's: reading numpy's costs ~40-90 us (it builds its
    624-word key one element at a time), torch's ~2 us.
    """
    state: dict[str, Any] = {"torch": torch.default_generator.get_state()}  # no torch.get_rng_state() frame
    if host:
        state["numpy"] = np.random.get_state()
        state["python"] = random.getstate()
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
    with lit_gpu's resumable loaders (:func:`sync_resumed_train_loader`:
    Lightning issue #20550, and a resume with another global batch). The sample order itself and
    the per-sample random streams of DataLoader workers are the loaders' state
    (:mod:`lit_gpu.data.stateful`), so together they resume exactly at any step.
    """

    def __init__(self) -> None:
        super().__init__()
        self._sanity_state: dict[str, Any] | None = None
        self._step_state: dict[str, Any] | None = None
        self._interrupt: Any = None  # this fit's CheckpointOnInterrupt, if any

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_interrupt": None}  # a copy belongs to no fit

    def _host_each_step(self) -> bool:
        """Whether a step's start must keep numpy's and Python's states too: wherever a save can land in the
        middle of a step. Under :class:`CheckpointOnInterrupt` in the main thread that takes a second
        signal, so they are kept from the first signal on; without it (or off the main thread), always."""
        return self._interrupt is None or self._interrupt.may_save_mid_step()

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # the states as the next step will find them: saved instead of the live ones when an
        # interrupt lands in the middle of that step (its random draws are then redone on resume)
        self._step_state = _capture(host=self._host_each_step())

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
            state = {**_capture(), **self._step_state}  # numpy's and Python's live where not kept
            checkpoint["callbacks"][self.state_key] = _serializable(state)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from lit_gpu.callbacks.interrupt import CheckpointOnInterrupt

        self._interrupt = next(
            (cb for cb in trainer.callbacks if isinstance(cb, CheckpointOnInterrupt)), None
        )
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


# ---- the fit loop and lit_gpu's resumable train loader (Lightning internals) ----------------------
def sync_resumed_train_loader(trainer: Any) -> None:
    """Make sure a resumed fit continues at the checkpoint's sample (call at ``on_train_start``).

    * Lightning issue #20550: when ``trainer.estimated_stepping_batches`` is read before the
      checkpoint is restored (e.g. to size ``OneCycleLR`` in ``configure_optimizers``), the fit
      loop builds the train loader early and never hands it the saved loader state. The pending
      state is loaded here, before the first batch is fetched (the loaders read their position when
      iteration starts).
    * A resume with another global batch (another batch size or world size): Lightning's batch
      counters of the current epoch are moved so that the epoch ends exactly when the loader has
      yielded its remaining batches.
    """
    fit_loop = trainer.fit_loop
    combined = fit_loop._combined_loader  # private (pinned), as the two below
    if combined is None:
        return
    if fit_loop._combined_loader_states_to_load and fit_loop.restarting:
        fit_loop._load_combined_loader_states()
    loader = _resumable_train_loader(trainer)
    if loader is None or not loader.position_state.restored_mid_epoch:
        return
    done = max(0, len(loader) - loader.remaining_batches())
    progress = fit_loop.epoch_loop.batch_progress.current
    delta = done - progress.ready
    if delta:
        progress.ready += delta
        progress.started += delta
        progress.processed += delta
        progress.completed += delta


def batches_in_flight(trainer: Any) -> int:
    """Batches the train loader handed out whose training step did not finish (an interrupt mid-step).

    0 at every ordinary save point (after a step). Compares the loader's batch count in the epoch
    with Lightning's ``processed`` counter (incremented right after the optimizer step).
    """
    loader = _resumable_train_loader(trainer)
    if loader is None or not trainer.training:
        return 0
    state = loader.position_state
    handed_out = len(loader) - loader.remaining_batches() + state.yielded_batches
    return max(0, handed_out - trainer.fit_loop.epoch_loop.batch_progress.current.processed)


def patch_interrupted_loader_state(trainer: Any, checkpoint: dict[str, Any], in_flight: int) -> None:
    """In ``checkpoint``, count only the batches whose step finished as consumed."""
    loader = _resumable_train_loader(trainer)
    fit_state = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
    if loader is not None and in_flight > 0 and "combined_loader" in fit_state:
        fit_state["combined_loader"] = [loader.position_state.state_without(in_flight)]


def _resumable_train_loader(trainer: Any) -> Any:
    combined = trainer.fit_loop._combined_loader
    if combined is None or len(combined.flattened) != 1:
        return None
    loader = combined.flattened[0]
    return loader if isinstance(getattr(loader, "position_state", None), GlobalPosition) else None
