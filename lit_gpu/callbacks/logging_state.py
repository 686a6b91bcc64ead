"""Keep what ``self.log`` gathered in an epoch across a mid-epoch save, so a resumed run's curves are exact.

Lightning drops a training epoch's logging accumulators when a fit resumes mid-epoch: the epoch
aggregates (``*_epoch`` columns, torchmetrics objects) then cover only the steps after the resume, and
a value logged once an epoch (a learning rate at its first batch) is blank for the rest of it.
:class:`LoggingStateCallback` saves them with the checkpoint, next to the weights and the RNG states of
the step, and puts them back when the resumed fit starts (:mod:`lit_gpu.upstream.logging_state`).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.callbacks.rng_state import batches_in_flight
from lit_gpu.checkpoints import contracts as c
from lit_gpu.upstream.logging_state import (
    LOGGING_STATE_KEY,
    REDUCTION_NAMES,
    VAL_STEPS_KEY,
    capture,
    check_val_steps,
    metric_state_defaults,
    restore,
    restore_metric_states,
    set_val_steps,
    val_steps,
)


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
    (found by tests/unit/data/test_resume_property.py)."""
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
            (LOGGING_STATE_KEY, "results", c.EACH), c.checked("an entry with its value", tensor_value)
        ),
        c.Contract(
            (LOGGING_STATE_KEY, "metrics"),
            c.checked("states of the module's torchmetrics Metrics, shaped as their defaults", all_metrics),
        ),
    ]


def messages_shown(value: Any) -> str:
    """A name from the file, safe to print."""
    return messages.shown(repr(value), limit=60)
