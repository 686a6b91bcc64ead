"""Exact resume's state beside the weights: the generators, the epoch's logged values, the finished run.

* :class:`RNGStateCallback` saves the torch, CUDA, numpy and Python RNG states of the step and restores them;
  at the fit's start it puts a resumed train loader at the checkpoint's sample (:mod:`lit_gpu.resume.loaders`,
  :mod:`lit_gpu.resume.plain`) and repairs Lightning's loop counters (Lightning internals, in
  :mod:`lit_gpu.upstream`).
* :class:`LoggingStateCallback` keeps what ``self.log`` gathered in the epoch across a mid-epoch save
  (Lightning drops it), so the resumed run's curves are exact (above).
* :func:`finished_line`: a resume of a run that had reached its limit says so in one line.
"""

from __future__ import annotations

import random
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.checkpoints import contracts as c
from lit_gpu.errors import LitGpuError
from lit_gpu.resume.loaders import GlobalPosition, position_contract
from lit_gpu.resume.plain import (
    ReplayDataLoader,
    make_replayable,
    prepare_train_loaders,
    release_train_loaders,
    seed_persistent_workers,
    train_loaders,
    why_not_replayable,
)
from lit_gpu.upstream import (
    load_pending_loader_states,
    open_accumulation,
    repair_unstarted_epoch,
    stands_aside,
    start_next_epoch_after_a_finished_one,
    train_combined_loader,
)

__all__ = ["LoggingStateCallback", "RNGStateCallback", "finished_line"]


# ---- the generators: RNGStateCallback ---------------------------------------------------------------
_MT_WORDS = 624  # Mersenne Twister state: 624 32-bit words and a position 0..624 (Python's and numpy's)
BAD_RNG_STATE = (
    "the checkpoint {ckpt} holds a malformed random-number state ({problem}); it is corrupt or was not"
    " written by lit_gpu: resume from another checkpoint, or start afresh without --ckpt_path"
)
PERSISTENT_WORKERS = (
    "resumed at {point}: every batch comes in the uninterrupted run's order, this epoch and the next ones,"
    " but the training loader's persistent workers (started in an earlier epoch) restart their random"
    " streams: a random augmentation in them differs from the uninterrupted run until the fit ends"
)
EPOCH_START_SKIPPED = (
    "resumed in the middle of an epoch at {point}: Lightning does not run on_train_epoch_start again, so what"
    " {hooks} set at that epoch's start is as the restore left it (the trainable parameters are as saved)"
)
WORKERS_SEED_KEY = "eval_workers_seed"  # the seed of evaluation loaders' persistent workers
TRAINABLE_KEY = "trainable"  # {"frozen": parameter names, "untracked": batch norms' names} at the save
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
    if WORKERS_SEED_KEY in state and not _is_int(state[WORKERS_SEED_KEY], 0, 2**64 - 1):
        return None, "the evaluation workers' seed is not an int in [0, 2**64)"
    if TRAINABLE_KEY in state and (problem := _trainable_problem(state[TRAINABLE_KEY])) is not None:
        return None, problem
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

    Checkpoints keep the torch, CUDA, numpy and Python RNG states at the save point (any step), which
    parameters do not train (:func:`trainable`) and the seed of evaluation loaders' persistent workers; a
    resume restores them. The sanity check is RNG-neutral. At ``on_train_start`` a resumed fit continues at
    the checkpoint's sample (:func:`sync_resumed_train_loader`: Lightning #20550, another global batch); the
    order and the per-sample streams are the loaders' state (:mod:`lit_gpu.resume.loaders`, ``plain``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._sanity_state: dict[str, Any] | None = None
        self._step_state: dict[str, Any] | None = None
        self._interrupt: Any = None  # this fit's CheckpointOnInterrupt, if any
        self._trainer: Any = None
        self._workers_seed: int | None = None  # evaluation loaders' persistent workers (kept in checkpoints)
        self._trainable: dict[str, list[str]] | None = None  # restored: what was frozen at the save

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_interrupt": None, "_trainer": None}  # a copy belongs to no fit

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer  # to name the checkpoint a malformed state came from
        if stage == "fit":  # a module's plain train loaders resume mid-epoch too (lit_gpu.resume.plain)
            prepare_train_loaders(trainer.fit_loop, make_replayable, ours=_is_replay)
            self._seed_evaluation_workers(trainer)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        release_train_loaders(trainer.fit_loop)
        self.on_exception(trainer, pl_module, None)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: Any) -> None:
        own = vars(trainer.strategy).get("process_dataloader")  # a fit that raised gets no teardown
        if getattr(own, "_lit_gpu_seeds_workers", False):
            del trainer.strategy.process_dataloader

    def _seed_evaluation_workers(self, trainer: pl.Trainer) -> None:
        """Give a fit's evaluation loaders with persistent workers a generator of their own
        (:func:`~lit_gpu.resume.plain.seed_persistent_workers`), seeded as in the checkpoint's run."""
        original = trainer.strategy.process_dataloader
        if getattr(original, "_lit_gpu_seeds_workers", False):
            return

        def process_dataloader(dataloader: object) -> object:
            loader = original(dataloader)
            if trainer.training:  # the train loader's workers are its replay's (lit_gpu.resume.plain)
                return loader
            if self._workers_seed is None:
                self._workers_seed = int(torch.initial_seed())
            return seed_persistent_workers(loader, self._workers_seed)

        process_dataloader._lit_gpu_seeds_workers = True  # type: ignore[attr-defined]
        trainer.strategy.process_dataloader = process_dataloader  # type: ignore[method-assign]

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
            checkpoint["callbacks"][self.state_key] = self._with_fit_state(_serializable(state))

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from lit_gpu.preemption import CheckpointOnInterrupt

        self._interrupt = next(
            (cb for cb in trainer.callbacks if isinstance(cb, CheckpointOnInterrupt)), None
        )
        sync_resumed_train_loader(trainer)
        start_next_epoch_after_a_finished_one(trainer)  # Lightning's counters after an epoch-end resume
        trainable, self._trainable = self._trainable, None
        if trainer.ckpt_path is not None and trainable is not None:
            restore_trainable(pl_module, trainable)
        if trainer.ckpt_path is not None and (skipped := skipped_epoch_start_hooks(trainer)):
            point = messages.fit_point(trainer, trainer.fit_loop.epoch_loop.batch_progress.current.processed)
            messages.tell(EPOCH_START_SKIPPED.format(point=point, hooks=skipped))
        if trainer.ckpt_path is not None and (done := open_accumulation(trainer)):
            point = messages.fit_point(trainer, trainer.fit_loop.epoch_loop.batch_progress.current.processed)
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
        return self._with_fit_state(_serializable(_capture()))

    def _with_fit_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state``; in a fit with the evaluation workers' seed and what does not train (``trainable``)."""
        trainer = self._trainer
        if trainer is not None and getattr(trainer.state, "fn", None) == "fit":
            if self._workers_seed is not None:
                state[WORKERS_SEED_KEY] = self._workers_seed
            if trainer.lightning_module is not None:
                state[TRAINABLE_KEY] = trainable(trainer.lightning_module)
        return state

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The saved generator states (:func:`_checked`), and the train loader's position it resumes."""

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
        seed = state.get(WORKERS_SEED_KEY)
        self._workers_seed = seed if _is_int(seed, 0, 2**64 - 1) else self._workers_seed
        self._trainable = state.get(TRAINABLE_KEY)  # checked by the contract (_checked)


# ---- what a callback's epoch-start hook set: trainable parameters ---------------------------------------
def trainable(pl_module: Any) -> dict[str, list[str]]:
    """The parameters that do not train and the batch norms that track no statistics (a fine-tuning
    callback's ``freeze``/``make_trainable``), by name: Lightning restores neither, and a resume skips the
    epoch-start hook that set them (``BaseFinetuning`` freezes the backbone again in ``setup``)."""
    return {
        "frozen": [name for name, p in pl_module.named_parameters() if not p.requires_grad],
        "untracked": [
            name for name, m in pl_module.named_modules() if getattr(m, "track_running_stats", True) is False
        ],
    }


def _trainable_problem(value: Any) -> str | None:
    if not isinstance(value, dict) or set(value) != {"frozen", "untracked"}:
        return "the trainable parameters are not a mapping of frozen and untracked names"
    for names in value.values():
        if not isinstance(names, list) or len(names) > 2**20:
            return "the trainable parameters' names are not a list"
        if not all(isinstance(name, str) and len(name) <= 1000 for name in names):
            return "a trainable parameter's name is not a string of at most 1000 characters"
    return None


def restore_trainable(pl_module: Any, saved: dict[str, list[str]]) -> None:
    """Set what trains (and which batch norms track statistics) as at the save, where the module has every
    name the checkpoint lists (else it is another module: left as it is)."""
    frozen, untracked = set(saved["frozen"]), set(saved["untracked"])
    parameters, modules = dict(pl_module.named_parameters()), dict(pl_module.named_modules())
    if not frozen <= set(parameters) or not untracked <= set(modules):
        return
    for name, parameter in parameters.items():
        if parameter.is_floating_point() or parameter.is_complex():
            parameter.requires_grad_(name not in frozen)
    for name, module in modules.items():
        if isinstance(getattr(module, "track_running_stats", None), bool):
            module.track_running_stats = name not in untracked


def skipped_epoch_start_hooks(trainer: Any) -> str | None:
    """The user's ``on_train_epoch_start`` hooks (the module's, callbacks' other than Lightning's and
    lit_gpu's) that a resume in the middle of an epoch does not run (``None``: none, or not mid-epoch)."""
    processed = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    batches = trainer.num_training_batches
    if not (isinstance(batches, int) and 0 < processed < batches):
        return None
    module = trainer.lightning_module
    names = []
    if type(module).on_train_epoch_start is not pl.LightningModule.on_train_epoch_start:
        names.append(f"{type(module).__name__}.on_train_epoch_start")
    for callback in trainer.callbacks:
        hook = type(callback).on_train_epoch_start
        if hook is not Callback.on_train_epoch_start and not hook.__module__.startswith(
            ("lightning.", "lit_gpu.")
        ):
            names.append(f"{type(callback).__name__}.on_train_epoch_start")
    return ", ".join(names) or None


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
    A loader other than the saved one (lit_gpu.resume.plain) is one line, wherever the resume is.
    """
    processed = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    epoch_batches = trainer.num_training_batches
    done = 0 if processed >= epoch_batches else processed
    for loader in train_loaders(trainer):
        if isinstance(loader, ReplayDataLoader):
            batches = epoch_batches if isinstance(epoch_batches, int) else None
            why, changed = loader.resume_at(processed, batches), loader.changes()
            if why is None and changed is not None:  # an epoch-start resume with another loader
                point = messages.fit_point(trainer, done)
                messages.tell(messages.LOADER_CHANGED.format(point=point, what=changed))
                return
            if why is None and loader.restarts_workers(done):
                messages.tell(PERSISTENT_WORKERS.format(point=messages.fit_point(trainer, done)))
        else:
            why = why_not_replayable(loader) if done else None
        if why is not None:
            messages.tell(NOT_AT_THE_BATCH.format(point=messages.fit_point(trainer, done), why=why))
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


# ---- the epoch's logged values as plain data (Lightning's _ResultCollection, gated: lit_gpu.upstream) ---
# What ``self.log`` has gathered in the current training epoch, as plain data for a checkpoint, and back.
#
# Lightning keeps the epoch's logged values (step values, epoch means/max/min/sum, torchmetrics objects) in
# the training loop's private ``_ResultCollection`` and does not save it: after a mid-epoch resume its epoch
# aggregates cover only the steps after the resume, and a value logged once an epoch (a learning rate at
# the first batch) is missing from the rest of the epoch's rows. torchmetrics states are in a checkpoint
# only when ``persistent``. :func:`capture` takes both at a save made inside an epoch's batches, and
# :func:`restore` puts them back when the resumed fit starts, so the resumed run logs what the
# uninterrupted one did. Private names read here are pinned in tests/unit/test_upstream_pins.py
# (``test_result_collection__result_metric__metadata__sync__first_loop_iter``).
#
# Kept as plain containers and tensors: a checkpoint with it still loads with ``weights_only=True``.

#: the checkpoint key (top level) of the logging state of a save made inside an epoch
LOGGING_STATE_KEY = "lit_gpu_logging_state"

# reductions Lightning accepts (``self.log(reduce_fx=...)``), by a name that survives a checkpoint
_REDUCTIONS: dict[str, Any] = {
    "mean": torch.mean,
    "max": torch.max,
    "min": torch.min,
    "sum": torch.sum,
    "builtins.max": max,
    "builtins.min": min,
    "builtins.sum": sum,
}


#: the reduction names a saved logging state may hold
REDUCTION_NAMES = tuple(_REDUCTIONS)


def metric_state_defaults(metric: Any) -> dict[str, Any] | None:
    """A torchmetrics ``Metric``'s states and their defaults (``Metric._defaults``: no public API lists
    them with their shapes and dtypes), or None. Read as :func:`capture` reads ``metric_state``."""
    defaults = getattr(metric, "_defaults", None)
    return dict(defaults) if isinstance(defaults, dict) else None


def _reduction_name(fn: Any) -> str | None:
    return next((name for name, known in _REDUCTIONS.items() if known is fn), None)


def inside_epoch_batches(trainer: Any) -> bool:
    """Whether the fit is between an epoch's start and its end hooks (its batches or a validation inside).

    Lightning counts an epoch ``processed`` at its end, before ``on_train_epoch_end``: an epoch-end save
    holds no epoch in progress (its aggregates were just logged).
    """
    from lightning.pytorch.trainer.states import TrainerFn

    if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking:
        return False
    epoch = trainer.fit_loop.epoch_progress.current
    return epoch.started > epoch.processed


def _supported(trainer: Any) -> bool:
    """Whether this Lightning has what :func:`capture` and :func:`restore` read (else Lightning's own
    behaviour: the epoch's accumulators start afresh on a resume)."""

    if stands_aside("logging state"):  # the gate's line says why
        return False
    try:
        from lightning.pytorch.trainer.connectors.logger_connector import result
    except ImportError:
        return False
    connector = getattr(trainer, "_logger_connector", None)
    return (
        all(hasattr(result, name) for name in ("_Metadata", "_ResultMetric", "_Sync"))
        and hasattr(connector, "_first_loop_iter")
        and isinstance(getattr(trainer.fit_loop.epoch_loop, "_results", None), dict)
    )


def _results(trainer: Any) -> Any:
    return trainer.fit_loop.epoch_loop._results  # the training ResultCollection (private, pinned)


def _capture_results(trainer: Any) -> list[dict[str, Any]] | None:
    entries = []
    for key, item in _results(trainer).items():
        meta = item.meta
        reduce_name = _reduction_name(meta.reduce_fx)
        if reduce_name is None or meta.sync.group is not None:
            return None  # not expressible as plain data: leave the whole epoch to Lightning
        entry: dict[str, Any] = {
            "key": key,
            "fx": meta.fx,
            "name": meta.name,
            "prog_bar": meta.prog_bar,
            "logger": meta.logger,
            "on_step": meta.on_step,
            "on_epoch": meta.on_epoch,
            "reduce_fx": reduce_name,
            "enable_graph": meta.enable_graph,
            "add_dataloader_idx": meta.add_dataloader_idx,
            "dataloader_idx": meta.dataloader_idx,
            "metric_attribute": meta.metric_attribute,
            "sync_dist": meta.sync.should,
            "rank_zero_only": meta.sync.rank_zero_only,
            "is_tensor": item.is_tensor,
            "has_reset": item.has_reset,
            "update_count": int(item._update_count),
        }
        cache = item._forward_cache
        entry["forward_cache"] = cache.detach().clone() if isinstance(cache, torch.Tensor) else None
        if item.is_tensor:
            entry["value"] = item.value.detach().clone()
            if meta.is_mean_reduction:
                entry["cumulated_batch_size"] = item.cumulated_batch_size.detach().clone()
        elif meta.metric_attribute is None:
            return None
        entries.append(entry)
    return entries


def _capture_metrics(pl_module: Any) -> dict[str, Any]:
    """The state of every torchmetrics ``Metric`` of the module (persistent or not)."""
    from torchmetrics import Metric

    metrics: dict[str, Any] = {}
    for name, metric in pl_module.named_modules():
        if not isinstance(metric, Metric) or not name:
            continue
        states = {}
        for attr, value in metric.metric_state.items():
            if isinstance(value, torch.Tensor):
                states[attr] = value.detach().clone()
            else:
                states[attr] = [v.detach().clone() for v in value]
        cache = metric._forward_cache
        metrics[name] = {
            "states": states,
            "update_count": int(metric.update_count),
            "forward_cache": cache.detach().clone() if isinstance(cache, torch.Tensor) else None,
        }
    return metrics


def capture(trainer: Any, pl_module: Any) -> dict[str, Any] | None:
    """The epoch's logging state now, or None where there is none to keep (or it cannot be kept).

    None outside an epoch's batches, and with several processes (each holds its own accumulators;
    a checkpoint holds rank 0's).
    """
    if trainer.world_size != 1 or not inside_epoch_batches(trainer) or not _supported(trainer):
        return None
    results = _capture_results(trainer)
    if results is None:
        return None
    return {"results": results, "metrics": _capture_metrics(pl_module)}


def _restore_metrics(pl_module: Any, saved: dict[str, Any]) -> None:
    modules = dict(pl_module.named_modules())
    for name, state in saved.items():
        metric = modules.get(name)
        if metric is None:
            continue
        device = metric.device
        for attr, value in state["states"].items():
            if isinstance(value, torch.Tensor):
                setattr(metric, attr, value.to(device))
            else:
                setattr(metric, attr, [v.to(device) for v in value])
        metric._update_count = state["update_count"]
        metric._computed = None
        cache = state.get("forward_cache")
        metric._forward_cache = cache.to(device) if isinstance(cache, torch.Tensor) else None


def _restore_results(trainer: Any, pl_module: Any, entries: list[dict[str, Any]]) -> None:
    from lightning.pytorch.trainer.connectors.logger_connector.result import _Metadata, _ResultMetric, _Sync

    results = _results(trainer)
    modules = dict(pl_module.named_modules())
    device = pl_module.device
    for entry in entries:
        meta = _Metadata(
            fx=entry["fx"],
            name=entry["name"],
            prog_bar=entry["prog_bar"],
            logger=entry["logger"],
            on_step=entry["on_step"],
            on_epoch=entry["on_epoch"],
            reduce_fx=_REDUCTIONS[entry["reduce_fx"]],
            enable_graph=entry["enable_graph"],
            add_dataloader_idx=entry["add_dataloader_idx"],
            dataloader_idx=entry["dataloader_idx"],
            metric_attribute=entry["metric_attribute"],
        )
        # as LightningModule.log builds it: the strategy's reduce, the group None
        meta.sync = _Sync(
            _should=entry["sync_dist"],
            fn=trainer.strategy.reduce,
            _group=None,
            rank_zero_only=entry["rank_zero_only"],
        )
        item = _ResultMetric(meta, entry["is_tensor"])
        cache = entry.get("forward_cache")
        cache = cache.to(device) if isinstance(cache, torch.Tensor) else None
        if entry["is_tensor"]:
            item.value = entry["value"].to(device)
            if "cumulated_batch_size" in entry:
                item.cumulated_batch_size = entry["cumulated_batch_size"].to(device)
            item._forward_cache = cache
        else:
            metric = modules.get(entry["metric_attribute"])
            if metric is None:
                continue
            item.value = metric
            item._forward_cache = metric._forward_cache
        item._update_count = entry["update_count"]
        item.has_reset = entry["has_reset"]
        results[entry["key"]] = item


def restore(trainer: Any, pl_module: Any, state: dict[str, Any]) -> None:
    """Put back a :func:`capture` when the resumed fit starts training (``on_train_start``).

    The logger connector is told that the epoch's first batch already ran, so that the next
    ``self.log`` adds to the restored values instead of starting the epoch's collection afresh.
    """
    if trainer.world_size != 1 or not _supported(trainer):
        return
    _restore_metrics(pl_module, state.get("metrics", {}))
    _restore_results(trainer, pl_module, state.get("results", []))
    # None -> True at the next batch start would reset the collection's tensors; True -> False does not
    trainer._logger_connector._first_loop_iter = True  # private, pinned


def restore_metric_states(trainer: Any, pl_module: Any, state: dict[str, Any]) -> None:
    """Put back the torchmetrics states of a :func:`capture` again, after the module's own hooks of the fit's
    start (``on_train_start``, ``on_train_epoch_start``: a module that resets a metric there, as
    lightning-hydra-template's ``val_acc_best.reset()``, would drop what :func:`restore` put back)."""
    if trainer.world_size == 1 and _supported(trainer):
        _restore_metrics(pl_module, state.get("metrics", {}))


# ---- the step of per-step validation rows ---------------------------------------------------------
#: the key, in LoggingStateCallback's own state (``checkpoint["callbacks"][its state_key]``), of the
#: validation loop's batch counters: a dict {dataloader index (int, 0 <= i < 1000): batches validated in
#: this fit so far (int, 0 <= n < 2**62)}; checked by check_val_steps before it is restored
VAL_STEPS_KEY = "val_steps"


def val_steps(trainer: Any) -> dict[int, int]:
    """Batches each validation loader has logged at in this fit: the step of per-step validation rows.

    Lightning keeps them in the validation loop (private ``_seen_batches_per_dataloader``, pinned by
    test_evaluation_loop__seen_batches_per_dataloader) and does not save them: after a resume its
    per-step validation rows would start again at step 0.
    """

    if stands_aside("validation steps"):  # aside: they start again at 0 after a resume, as in Lightning
        return {}
    seen = getattr(trainer.fit_loop.epoch_loop.val_loop, "_seen_batches_per_dataloader", None)
    return {int(k): int(v) for k, v in seen.items()} if isinstance(seen, dict) else {}


def check_val_steps(value: Any) -> dict[int, int] | None:
    """``value`` as :func:`set_val_steps` takes it, or None when it is not the :data:`VAL_STEPS_KEY` shape."""
    if not isinstance(value, dict) or len(value) > 1000:
        return None
    for key, count in value.items():
        for number, high in ((key, 1000), (count, 2**62)):
            if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < high:
                return None
    return dict(value)


def set_val_steps(trainer: Any, counts: dict[int, int]) -> None:
    """Continue the per-step validation rows' steps at ``counts`` (the validation loop has its loaders)."""

    if stands_aside("validation steps"):
        return
    seen = getattr(trainer.fit_loop.epoch_loop.val_loop, "_seen_batches_per_dataloader", None)
    if isinstance(seen, dict):
        seen.update(counts)


# ---- the epoch's logged values: LoggingStateCallback -------------------------------------------------
class LoggingStateCallback(Callback):
    """Save the current epoch's logged values and torchmetrics states in a mid-epoch checkpoint; restore them.

    Covers any LightningModule that logs with ``self.log`` (tensors or torchmetrics objects) and
    lit_gpu's modules' own train-loss accumulators. A save at an epoch's end holds nothing (its
    aggregates were logged), so does one with several processes (each process has its own
    accumulators; Lightning's behaviour stays) and one made in the middle of a training step (a second
    Ctrl+C: the step's values are partly logged).
    """

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[str, Any] | None = None
        self._again: dict[str, Any] | None = None  # restored at on_train_start: the metrics once more, later
        self._val_steps: dict[int, int] | None = None
        self._trainer: pl.Trainer | None = None

    def __getstate__(self) -> dict[str, Any]:  # a copy belongs to no fit
        return {**self.__dict__, "_pending": None, "_again": None, "_val_steps": None, "_trainer": None}

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer  # state_dict() reads its validation loop's counters

    @override
    def state_dict(self) -> dict[str, Any]:
        """The validation loop's batch counters of this fit (``val_steps``): per-step validation rows continue
        at their step after a resume. Kept in the callback's own state, so the checkpoint's top level stays
        Lightning's."""
        trainer = self._trainer
        if trainer is not None and trainer.state.fn == "fit" and (steps := val_steps(trainer)):
            return {VAL_STEPS_KEY: steps}
        return {}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._val_steps = check_val_steps(state_dict.get(VAL_STEPS_KEY, {}))  # checked by the contract

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if batches_in_flight(trainer) or _epoch_batches_done(trainer):
            return
        state = capture(trainer, pl_module)
        if state is not None:
            checkpoint[LOGGING_STATE_KEY] = state

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """The epoch's logged values and metric states (:func:`logging_state_contract`)."""
        steps = c.checked(
            "validation steps by loader index (at most 1000 ints >= 0)",
            lambda value: None if check_val_steps(value) is not None else "",
        )
        own = ("callbacks", self.state_key)
        state = c.checked(
            "LoggingStateCallback's state (a dict)", lambda value: None if isinstance(value, dict) else ""
        )
        return [
            *logging_state_contract(pl_module),
            c.Contract(own, state),
            c.Contract((*own, VAL_STEPS_KEY), steps),
        ]

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._pending = checkpoint.get(LOGGING_STATE_KEY)

    def _metrics_again(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The restored torchmetrics states once more, before the resumed fit's first batch or validation:
        Lightning runs callbacks' ``on_train_start`` before the module's, and a module's ``on_train_start``
        or ``on_train_epoch_start`` may reset a metric (as its uninterrupted run did at the fit's start)."""
        state, self._again = self._again, None
        if state is not None:
            restore_metric_states(trainer, pl_module, state)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._again is not None:
            self._metrics_again(trainer, pl_module)

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the first validation of a resumed fit: its loop built its loaders (and zeroed its counters) just now
        if self._again is not None and not trainer.sanity_checking:
            self._metrics_again(trainer, pl_module)  # a resume at a validation: before the first batch
        steps, self._val_steps = self._val_steps, None
        if steps and not trainer.sanity_checking:
            set_val_steps(trainer, steps)
        elif steps:
            self._val_steps = steps

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        state, self._pending = self._pending, None
        if state is not None:
            restore(trainer, pl_module, state)
            self._again = state

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._pending = self._val_steps = self._again = None
        self._trainer = None


def _epoch_batches_done(trainer: Any) -> bool:
    """Whether the epoch's batches have all been trained (a save at its last batch, before its end): a fit
    resumed from there goes on to the next epoch, so that epoch's values must not be restored into it
    (found by tests/unit/resume/test_resume_property.py)."""
    batches = trainer.num_training_batches
    processed = trainer.fit_loop.epoch_loop.batch_progress.current.processed
    return isinstance(batches, int) and batches > 0 and processed >= batches


def _metric_modules(pl_module: Any) -> dict[str, Any]:
    """The module's torchmetrics ``Metric`` submodules by name (what a saved metric state may name)."""
    try:
        from torchmetrics import Metric
    except ImportError:  # pragma: no cover - torchmetrics is a Lightning dependency
        return {}
    if pl_module is None:
        return {}
    return {name: m for name, m in pl_module.named_modules() if name and isinstance(m, Metric)}


def logging_state_contract(pl_module: Any) -> list[Any]:
    """What :func:`restore` expects of a saved logging state, the metrics checked against ``pl_module``'s.

    Each logged value: its flags, a reduction of :data:`_REDUCTIONS`, a scalar-sized tensor value; a metric
    entry names a torchmetrics ``Metric`` of the module; each saved metric state names one of that metric's
    states and has its default's type, dtype and (for a tensor default) shape.
    """
    metrics = _metric_modules(pl_module)
    flag = c.boolean()
    small = c.tensor(max_numel=2**16)
    entry = c.fields(
        {
            "key": c.text(),
            "fx": c.text(),
            "name": c.text(),
            "prog_bar": flag,
            "logger": flag,
            "on_step": flag,
            "on_epoch": flag,
            "reduce_fx": c.text(REDUCTION_NAMES),
            "enable_graph": flag,
            "add_dataloader_idx": flag,
            "dataloader_idx": c.optional(c.integer(0, 2**31)),
            "metric_attribute": c.optional(c.text(metrics) if pl_module is not None else c.text()),
            "sync_dist": flag,
            "rank_zero_only": flag,
            "is_tensor": flag,
            "has_reset": flag,
            "update_count": c.integer(0, 2**62),
            "forward_cache": c.optional(small),
            "value": small,
            "cumulated_batch_size": c.tensor(max_numel=1),
        },
        required=("key", "reduce_fx", "is_tensor", "update_count", "metric_attribute", "has_reset"),
    )

    def tensor_value(item: Any) -> str | None:
        if item.get("is_tensor") and "value" not in item:
            return "a tensor entry with no value"
        for name in ("value", "forward_cache", "cumulated_batch_size") if item.get("is_tensor") else ():
            value = item.get(name)
            if isinstance(value, torch.Tensor) and value.numel() != 1:  # Lightning's ValueError at the log
                return f"{c.holds(value)} as the {name} of {messages_shown(item.get('key'))}"
        return None

    def metric_state(name: str, saved: Any) -> str | None:
        metric = metrics.get(name) if pl_module is not None else None
        if pl_module is not None and metric is None:
            return f"{messages_shown(name)}, which is not a torchmetrics Metric of the module"
        if not isinstance(saved, dict) or not isinstance(saved.get("states"), dict):
            return ""
        if type(saved.get("update_count")) is not int or not 0 <= saved["update_count"] < 2**62:
            return "an update_count that is not an int >= 0"
        cache = saved.get("forward_cache")
        if cache is not None and small.problem(cache) is not None:
            return "a forward_cache that is not a small tensor"
        defaults = metric_state_defaults(metric) if metric is not None else None
        for attr, value in saved["states"].items():
            if defaults is not None and attr not in defaults:
                return f"state {messages_shown(attr)}, which is not a state of {type(metric).__name__}"
            default = None if defaults is None else defaults[attr]
            if isinstance(default, list) or default is None and isinstance(value, list):
                if not isinstance(value, list) or len(value) > 2**20:
                    return f"state {messages_shown(attr)} that is not a list of tensors"
                if any(c.tensor().problem(v) is not None for v in value):
                    return f"state {messages_shown(attr)} with an item that is not a contiguous tensor"
                continue
            want = (
                c.tensor(tuple(default.shape), dtypes=(default.dtype,)) if default is not None else c.tensor()
            )
            if want.problem(value) is not None:
                return f"state {messages_shown(attr)}: {c.holds(value)}, expected {want.expected}"
        return None

    def all_metrics(saved: Any) -> str | None:
        if not isinstance(saved, dict):
            return ""
        for name, one in saved.items():
            if (problem := metric_state(str(name), one)) is not None:
                return problem or f"metric {messages_shown(name)}: {c.holds(one)}"
        return None

    return [
        c.Contract((LOGGING_STATE_KEY,), c.fields({"results": c.list_of(entry), "metrics": c.anything()})),
        c.Contract(
            (LOGGING_STATE_KEY, "results", c.EACH),
            c.checked("an entry with its value (a logged tensor's: one number)", tensor_value),
        ),
        c.Contract(
            (LOGGING_STATE_KEY, "metrics"),
            c.checked("states of the module's torchmetrics Metrics, shaped as their defaults", all_metrics),
        ),
    ]


def messages_shown(value: Any) -> str:
    """A name from the file, safe to print."""
    return messages.shown(repr(value), limit=60)


# ---- a resume of a finished run ------------------------------------------------------------------------
def finished_line(trainer: pl.Trainer) -> str | None:
    """The line for a fit resumed from ``trainer.ckpt_path`` that trained no batch (the caller counted them)
    because the run had reached its limit; else ``None``."""
    ckpt = getattr(trainer, "ckpt_path", None)  # a stand-in trainer may have none
    if not ckpt:
        return None
    epoch = trainer.current_epoch  # the loop's count once done: max_epochs; the last epoch run is one less
    if trainer.max_epochs is not None and 0 < trainer.max_epochs <= epoch:
        epoch = trainer.max_epochs - 1
    point = messages.ckpt_point(messages.logged_step(trainer), epoch)
    max_steps = trainer.max_steps
    if max_steps is not None and max_steps >= 0 and trainer.global_step >= max_steps:
        limit, flag, example = f"max_steps={max_steps}", "--trainer.max_steps", max(2 * max_steps, 1)
    elif _epochs_reached(trainer):
        epochs = trainer.max_epochs
        limit, flag, example = f"max_epochs={epochs}", "--trainer.max_epochs", max(2 * (epochs or 0), 1)
    else:
        return None
    ckpt = messages.shown(ckpt)
    return messages.FINISHED_RUN.format(ckpt=ckpt, limit=limit, point=point, flag=flag, example=example)


def _epochs_reached(trainer: Any) -> bool:
    epochs = trainer.max_epochs
    return epochs is not None and epochs >= 0 and trainer.current_epoch >= epochs
