"""What ``self.log`` has gathered in the current training epoch, as plain data for a checkpoint, and back.

Lightning keeps the epoch's logged values (step values, epoch means/max/min/sum, torchmetrics objects) in
the training loop's private ``_ResultCollection`` and does not save it: after a mid-epoch resume its epoch
aggregates cover only the steps after the resume, and a value logged once an epoch (a learning rate at
the first batch) is missing from the rest of the epoch's rows. torchmetrics states are in a checkpoint
only when ``persistent``. :func:`capture` takes both at a save made inside an epoch's batches, and
:func:`restore` puts them back when the resumed fit starts, so the resumed run logs what the
uninterrupted one did. Private names read here are pinned in tests/unit/test_upstream_pins.py
(``test_result_collection__result_metric__metadata__sync__first_loop_iter``).

Kept as plain containers and tensors: a checkpoint with it still loads with ``weights_only=True``.
"""

from __future__ import annotations

from typing import Any

import torch

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
    from lit_gpu.upstream.gate import stands_aside

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
    from lit_gpu.upstream.gate import stands_aside

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
    from lit_gpu.upstream.gate import stands_aside

    if stands_aside("validation steps"):
        return
    seen = getattr(trainer.fit_loop.epoch_loop.val_loop, "_seen_batches_per_dataloader", None)
    if isinstance(seen, dict):
        seen.update(counts)
