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

from lit_gpu import messages, numbering
from lit_gpu.data.replay import ReplayDataLoader, make_replayable, why_not_replayable
from lit_gpu.data.stateful import GlobalPosition
from lit_gpu.errors import LitGpuError
from lit_gpu.upstream.loops import (
    load_pending_loader_states,
    open_accumulation,
    repair_unstarted_epoch,
    start_next_epoch_after_a_finished_one,
    train_combined_loader,
)
from lit_gpu.upstream.train_loaders import prepare_train_loaders, release_train_loaders, train_loaders

_MT_WORDS = 624  # Mersenne Twister state: 624 32-bit words and a position 0..624 (Python's and numpy's)
BAD_RNG_STATE = (
    "the checkpoint {ckpt} holds a malformed random-number state ({problem}); it is corrupt or was not"
    " written by lit_gpu: resume from another checkpoint, or start afresh without --ckpt_path"
)
PERSISTENT_WORKERS = (
    "resumed at {point}: the order continues exactly, but the training "
    "loader's persistent workers start new random streams (a random augmentation in them differs from "
    "the uninterrupted run)"
)
NOT_AT_THE_BATCH = (
    "resumed at {point}, but the training loader cannot continue there ({why}):"
    " the rest of the epoch comes from the loader's start, so this run differs from an uninterrupted one"
)


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


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and low <= value <= high


def _words(keys: Any) -> np.ndarray | None:
    """numpy's 624 key words as ``uint32``, or ``None`` when ``keys`` is not 624 integers in range."""
    if isinstance(keys, torch.Tensor):
        if keys.dtype.is_floating_point or keys.dtype.is_complex or keys.dtype == torch.bool:
            return None
        keys = keys.numpy()
    if not isinstance(keys, np.ndarray) or keys.dtype.kind not in "iu" or keys.shape != (_MT_WORDS,):
        return None
    if keys.size and (int(keys.min()) < 0 or int(keys.max()) >= 2**32):
        return None
    return keys.astype(np.uint32)


def _byte_state(value: Any, numel: int | None) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.dtype == torch.uint8
        and value.dim() == 1
        and (numel is None or value.numel() == numel)
    )


def _checked(state_dict: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``state_dict`` as :func:`_restore` takes it, or ``(None, what is wrong)``: every state's shape and
    types are checked before anything is set, so a malformed one changes no generator."""
    if not isinstance(state_dict, dict):
        return None, f"a {type(state_dict).__name__} instead of a mapping"
    missing = [key for key in ("torch", "numpy", "python") if key not in state_dict]
    if missing:
        return None, f"no {missing[0]} state"
    state = dict(state_dict)
    if not _byte_state(state["torch"], torch.default_generator.get_state().numel()):
        return None, "the torch state is not a byte tensor of the right size"
    numpy_state = state["numpy"]
    if not isinstance(numpy_state, list | tuple) or len(numpy_state) != 5:
        return None, "the numpy state is not a 5-tuple"
    kind, keys, pos, has_gauss, cached = numpy_state
    words = _words(keys)
    if kind != "MT19937" or words is None:
        return None, "the numpy state is not MT19937 with 624 32-bit words"
    if not _is_int(pos, 0, _MT_WORDS) or not _is_int(has_gauss, 0, 1):
        return None, "the numpy state's position is out of range"
    if not isinstance(cached, float | int | np.floating) or isinstance(cached, bool):
        return None, "the numpy state's cached gaussian is not a number"
    state["numpy"] = (kind, words, int(pos), int(has_gauss), float(cached))
    python_state = state["python"]
    if not isinstance(python_state, list | tuple) or len(python_state) != 3:
        return None, "the Python state is not a 3-tuple"
    version, internal, gauss = python_state
    if (
        not _is_int(version, 3, 3)
        or not isinstance(internal, list | tuple)
        or len(internal) != _MT_WORDS + 1
        or not all(_is_int(word, 0, 2**32 - 1) for word in internal[:_MT_WORDS])
        or not _is_int(internal[_MT_WORDS], 0, _MT_WORDS)
    ):
        return None, "the Python state is not version 3 with 624 32-bit words and a position"
    if gauss is not None and (not isinstance(gauss, float | int) or isinstance(gauss, bool)):
        return None, "the Python state's cached gaussian is not a number"
    state["python"] = (3, tuple(int(word) for word in internal), None if gauss is None else float(gauss))
    if "cuda" in state:
        cuda = state["cuda"]
        if not isinstance(cuda, list | tuple) or not all(_byte_state(one, None) for one in cuda):
            return None, "the CUDA states are not a list of byte tensors"
        if cuda and torch.cuda.is_available():
            numel = torch.cuda.get_rng_state(0).numel()
            if any(one.numel() != numel for one in cuda):
                return None, "a CUDA state is not of the right size"
    return state, None


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
        self._trainer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_interrupt": None, "_trainer": None}  # a copy belongs to no fit

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer  # to name the checkpoint a malformed state came from
        if stage == "fit":  # a module's plain train loaders resume mid-epoch too (lit_gpu.data.replay)
            prepare_train_loaders(trainer.fit_loop, make_replayable, ours=_is_replay)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        release_train_loaders(trainer.fit_loop)

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
        start_next_epoch_after_a_finished_one(trainer)  # Lightning's counters after an epoch-end resume
        if trainer.ckpt_path is not None and (done := open_accumulation(trainer)):
            point = numbering.fit_point(trainer, trainer.fit_loop.epoch_loop.batch_progress.current.processed)
            messages.tell(
                messages.RESUMED_BETWEEN_MICRO_BATCHES.format(
                    point=point, done=done, every=trainer.accumulate_grad_batches
                )
            )

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

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The saved generator states (:func:`_checked`), and the train loader's position it resumes."""
        from lit_gpu.checkpoints import contracts as c
        from lit_gpu.data.stateful import position_contract

        def fits(state: Any) -> str | None:
            tensors = [state.get("torch")] if isinstance(state, dict) else []
            tensors += list(state.get("cuda") or []) if isinstance(state, dict) else []
            if any(isinstance(t, torch.Tensor) and not t.is_contiguous() for t in tensors):
                return "a generator state that is a non-contiguous view"
            return _checked(state)[1]

        spec = c.checked("the torch, numpy and Python generator states as RNGStateCallback saves them", fits)
        return [c.Contract(("callbacks", self.state_key), spec), *position_contract()]

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # before Lightning restores the loops: an older lit_gpu's epoch counters (and no logged aggregates)
        fit_loop = checkpoint["loops"].get("fit_loop") if isinstance(checkpoint.get("loops"), dict) else None
        fitting = getattr(getattr(trainer, "state", None), "fn", None) == "fit"
        if fitting and isinstance(fit_loop, dict) and repair_unstarted_epoch(fit_loop):
            messages.tell(messages.RESUMED_UNSTARTED_EPOCH)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved states; a malformed one (a corrupt checkpoint) is one line, nothing set."""
        state, problem = _checked(state_dict)
        if state is None:
            ckpt = getattr(self._trainer, "ckpt_path", None) if self._trainer is not None else None
            raise LitGpuError(
                BAD_RNG_STATE.format(ckpt=messages.shown(ckpt or "being resumed", limit=200), problem=problem)
            )
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
    if train_combined_loader(trainer) is None:
        return
    load_pending_loader_states(trainer)
    _resume_plain_loaders(trainer)
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


def _is_replay(loader: Any) -> bool:
    return isinstance(loader, ReplayDataLoader)


def _resume_plain_loaders(trainer: Any) -> None:
    """Tell a module's replayable loaders where the epoch stopped; say once when one cannot continue there.

    The batches whose step finished are Lightning's ``processed`` counter of the epoch, restored from the
    checkpoint (a save after a step, at a validation, or in the middle of a step); all of them: an epoch end.
    A loader other than the saved one (lit_gpu.data.loader_order) is one line, wherever the resume is.
    """
    processed = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    epoch_batches = trainer.num_training_batches
    done = 0 if processed >= epoch_batches else processed
    for loader in train_loaders(trainer):
        if isinstance(loader, ReplayDataLoader):
            batches = epoch_batches if isinstance(epoch_batches, int) else None
            why, changed = loader.resume_at(processed, batches), loader.changes()
            if why is None and changed is not None:  # an epoch-start resume with another loader
                point = numbering.fit_point(trainer, done)
                messages.tell(messages.LOADER_CHANGED.format(point=point, what=changed))
                return
            if why is None and loader.restarts_workers(done):
                messages.tell(PERSISTENT_WORKERS.format(point=numbering.fit_point(trainer, done)))
        else:
            why = why_not_replayable(loader) if done else None
        if why is not None:
            messages.tell(NOT_AT_THE_BATCH.format(point=numbering.fit_point(trainer, done), why=why))
            return


def batches_in_flight(trainer: Any) -> int:
    """Batches the train loader handed out whose training step did not finish (an interrupt mid-step).

    0 at every ordinary save point (after a step). Compares the loader's batch count in the epoch
    with Lightning's ``processed`` counter (incremented right after the optimizer step).
    """
    processed = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    replay = next((ld for ld in train_loaders(trainer) if isinstance(ld, ReplayDataLoader)), None)
    if replay is not None and trainer.training:
        return max(0, replay.batches_handed_out - processed)
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
    combined = train_combined_loader(trainer)
    if combined is None or len(combined.flattened) != 1:
        return None
    loader = combined.flattened[0]
    return loader if isinstance(getattr(loader, "position_state", None), GlobalPosition) else None
