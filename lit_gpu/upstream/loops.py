"""Small accessors for Lightning's private loop, trainer and module state (what callbacks and modules read).

Each names the private member it reads; the gate's features (:mod:`lit_gpu.upstream.table`) declare
them, and a feature that stands aside stops calling them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lit_gpu.upstream.gate import stands_aside


# ---- the fit loop's train loader (exact resume) ---------------------------------------------------
def train_combined_loader(trainer: Any) -> Any:
    """The fit loop's ``CombinedLoader`` of train loaders (``_FitLoop._combined_loader``), or None."""
    return getattr(trainer.fit_loop, "_combined_loader", None)


def load_pending_loader_states(trainer: Any) -> None:
    """Hand the loaders the checkpoint's saved states if the fit loop built them before the restore
    (Lightning issue #20550: ``_combined_loader_states_to_load``, ``_load_combined_loader_states``)."""
    stands_aside("exact resume")  # cannot stand aside: on a mismatch the line says so, and it runs
    fit_loop = trainer.fit_loop
    if fit_loop._combined_loader_states_to_load and fit_loop.restarting:
        fit_loop._load_combined_loader_states()


def start_next_epoch_after_a_finished_one(trainer: Any) -> bool:
    """Resumed from a save at an epoch's last batch (before its end hooks), Lightning's ``_FitLoop.reset``
    counts that epoch done (``epoch_progress`` processed and completed) but leaves its restart stage at
    ``RESTARTED_MID_EPOCH``: the next epoch's ``on_advance_start`` then skips its ``increment_ready`` and
    ``increment_started`` (and ``on_train_epoch_start``), so every later save reads as an epoch already
    finished and a resume from one logs a step lower. Clear the stage (``reset_restart_stage``) so the next
    epoch starts as in an uninterrupted run; True when it did. Call after the fit loop's ``reset``."""
    stands_aside("exact resume")  # cannot stand aside: on a mismatch the line says so, and it runs
    fit_loop = trainer.fit_loop
    current = fit_loop.epoch_progress.current
    if not fit_loop.restarted_mid_epoch or current.processed != current.started:
        return False
    fit_loop.reset_restart_stage()
    return True


def repair_unstarted_epoch(fit_loop_state: Any) -> bool:
    """Count the running epoch started in a checkpoint's ``loops.fit_loop`` written before
    :func:`start_next_epoch_after_a_finished_one` (by a fit that resumed at an epoch's last batch): its
    ``epoch_progress`` has ready and started one short (the epoch reads as finished while its batches are
    mid-epoch, or processed ahead of started), and Lightning would resume it a step lower. True when it
    did."""
    try:
        epoch, batches = fit_loop_state["epoch_progress"], fit_loop_state["epoch_loop.batch_progress"]
        current, batch = epoch["current"], batches["current"]
        mid_epoch = current["ready"] == current["started"] == current["processed"]
        last = batches.get("is_last_batch")  # then ambiguous: left as is
        mid_epoch = mid_epoch and batch["processed"] == batch["completed"] + 1 >= 1 and last is False
        epoch_end = current["ready"] == current["started"] == current["processed"] - 1
        if not (mid_epoch or epoch_end):
            return False
        for counts in (current, epoch["total"]):
            counts["ready"], counts["started"] = counts["ready"] + 1, counts["started"] + 1
    except (KeyError, TypeError):  # not Lightning's loop state: its contract names what is wrong
        return False
    return True


# ---- the signal flag and handlers (CheckpointOnInterrupt) -----------------------------------------
def request_sigterm_stop(trainer: Any) -> None:
    """Set Lightning's SIGTERM flag (``trainer._signal_connector.received_sigterm``): the loops stop at
    the next step boundary or evaluation batch."""
    trainer._signal_connector.received_sigterm = True


def cancel_sigterm_stop(trainer: Any) -> None:
    """Clear the flag :func:`request_sigterm_stop` set: the stop waits for the next step boundary."""
    trainer._signal_connector.received_sigterm = False


def replace_restored_handler(trainer: Any, signum: int, ours: Any, previous: Any) -> None:
    """Where Lightning's teardown would put back ``ours`` for ``signum`` (the handlers it found at fit start,
    ``_signal_connector._original_handlers``), make it put back ``previous``."""
    connector = getattr(trainer, "_signal_connector", None)
    originals = getattr(connector, "_original_handlers", None)
    if isinstance(originals, dict) and originals.get(signum) == ours:
        originals[signum] = previous


# ---- gradient accumulation: is the fit between the micro-batches of one optimizer step? -------------
def open_accumulation(trainer: Any) -> int:
    """Training batches whose gradients are accumulated and not yet applied by an optimizer step (0: the
    fit is at an optimizer step boundary). Read after a batch (its end, a validation, a save): Lightning's
    own test, ``_TrainingEpochLoop._should_accumulate`` (the last batch did not step), and its count of
    the epoch's batches (``batch_progress.current.ready``). Manual optimization: always 0."""
    every = trainer.accumulate_grad_batches
    if every == 1:  # read after every batch: the common case first
        return 0
    stands_aside("whole steps")  # cannot stand aside: on a mismatch the line says so, and it runs
    module = trainer.lightning_module
    if module is None or not module.automatic_optimization or trainer.state.fn != "fit":
        return 0
    epoch_loop = trainer.fit_loop.epoch_loop
    if not epoch_loop._should_accumulate():
        return 0
    return epoch_loop.batch_progress.current.ready % every or every


# ---- the module's trainer -------------------------------------------------------------------------
def attached_trainer(module: Any) -> Any:
    """The trainer a LightningModule is attached to, or None (``module.trainer`` raises when there is none;
    this reads ``LightningModule._trainer``)."""
    return getattr(module, "_trainer", None)


# ---- checkpoint contents Lightning writes under private keys --------------------------------------
def batches_that_stepped(fit_loop_state: Mapping[str, Any]) -> int:
    """The epoch loop's ``_batches_that_stepped`` in a checkpoint's ``loops.fit_loop`` (KeyError: absent)."""
    return int(fit_loop_state["epoch_loop.state_dict"]["_batches_that_stepped"])


def saved_loop_counters(fit_loop_state: Any) -> tuple[int, int] | None:
    """``(global step, epoch)`` as a checkpoint's ``loops.fit_loop`` records them, or None where it holds no
    such counters: the optimizer steps (``epoch_loop.automatic_optimization.optim_progress``, or the manual
    optimization's ``optim_step_progress``: the other one stays 0) and the epochs completed
    (``epoch_progress.current.completed``), what ``Trainer.global_step`` and ``current_epoch`` read."""
    try:
        auto = fit_loop_state["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]["step"]
        manual = fit_loop_state.get("epoch_loop.manual_optimization.optim_step_progress", {})
        counts = (
            auto["total"]["completed"],
            manual.get("total", {}).get("completed", 0),
            fit_loop_state["epoch_progress"]["current"]["completed"],
        )
    except (KeyError, TypeError, AttributeError):
        return None
    if not all(type(count) is int for count in counts):
        return None  # the loops' contract names it
    return max(counts[0], counts[1]), counts[2]


def saved_batches_that_stepped(loop_state: Mapping[str, Any], default: Any = 0) -> Any:
    """What a loop's saved ``state_dict`` holds as the epoch loop's ``_batches_that_stepped``, unchecked (a
    restore contract checks it: :mod:`lit_gpu.checkpoints.contracts`)."""
    return loop_state.get("_batches_that_stepped", default)


def pop_cli_instantiation(hparams: dict[str, Any]) -> tuple[Any, Any]:
    """Remove and return LightningCLI's ``(_instantiator, _class_path)`` keys of saved hyper-parameters."""
    return hparams.pop("_instantiator", None), hparams.pop("_class_path", None)


def recorded_class_path(hparams: Any) -> Any:
    """The class path LightningCLI recorded in saved hyper-parameters (``_class_path``), or None."""
    return hparams.get("_class_path") if isinstance(hparams, Mapping) else None


__all__ = [
    "attached_trainer",
    "batches_that_stepped",
    "cancel_sigterm_stop",
    "load_pending_loader_states",
    "open_accumulation",
    "pop_cli_instantiation",
    "recorded_class_path",
    "replace_restored_handler",
    "request_sigterm_stop",
    "saved_loop_counters",
    "train_combined_loader",
]
