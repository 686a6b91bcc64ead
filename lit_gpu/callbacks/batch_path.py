"""Lightning's per-batch training glue without its dispatch layers (:class:`LeanTrainingBatch`).

Around every ``training_step`` Lightning's ``_TrainingEpochLoop.advance`` and ``on_advance_end`` do a
few hundred Python calls of bookkeeping: three batch-transfer hooks through the data-hook selector,
the callback and strategy hook dispatch with its debug logging and profiler names, the trainer's
``_results``/``_active_loop``/``training`` properties (each an enum comparison) read a dozen times, the
accumulation, LR-scheduler and validation checks, each again through properties. Where nothing in this
fit can tell (:func:`lean_batch_blocker`), :class:`LeanTrainingBatch` gives the epoch loop an
``advance`` and ``on_advance_end`` that make the same calls in the same order, with the same progress
counters and ``_current_fx_name``, reading each object once. A batch outside the plain case
(restarting, gradient accumulation, a ``dataloader_iter`` step) runs Lightning's ``advance``; one after
which validation may run, or in a fit with a plateau scheduler or ``should_stop``, Lightning's
``on_advance_end``. The copy is tied to the Lightning source it mirrors: where the installed
Lightning's methods differ from it, the callback stands aside.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections import OrderedDict
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities import apply_func
from typing_extensions import override

from lit_gpu.callbacks.step_path import FitPatch, HookDispatch

#: SHA-256 (first 16 hex digits) of the Lightning methods the lean batch mirrors, as
#: ``inspect.getsource`` gives them (:func:`mirrored_source_digest`): Lightning 2.6.0 to 2.6.6
MIRRORED_SOURCE = "e95e3ce62333a518"

#: the data hooks between the loader and ``training_step`` (Lightning's defaults only move the batch)
TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def _mirrored() -> list[Any]:
    """The Lightning functions whose behaviour :class:`_LeanBatch` reproduces."""
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
    from lightning.pytorch.trainer.connectors.logger_connector.logger_connector import _LoggerConnector
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection

    return [
        _TrainingEpochLoop.advance,
        _TrainingEpochLoop.on_advance_end,
        _TrainingEpochLoop._should_check_val_fx,
        _TrainingEpochLoop._should_accumulate,
        _LoggerConnector.on_batch_start,
        _LoggerConnector.on_batch_end,
        _LoggerConnector.update_train_step_metrics,
        _LoggerConnector.should_update_logs.fget,
        _ResultCollection.metrics,
    ]


@functools.cache
def mirrored_source_digest() -> str:
    """SHA-256 (16 hex digits) of the installed Lightning's mirrored methods; "" if unreadable."""
    try:
        text = "\n".join(inspect.getsource(fn) for fn in _mirrored())
    except (OSError, TypeError):
        return ""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def lean_batch_blocker(trainer: pl.Trainer, pl_module: pl.LightningModule) -> str | None:
    """Why :class:`LeanTrainingBatch` must leave this fit to Lightning's loop, or None if it need not.

    It covers one device (``SingleDeviceStrategy``), no profiler, automatic optimization, a precision
    plugin that leaves inputs as they are, Lightning's batch-transfer hooks (neither the module nor the
    data module overrides them), and the Lightning release whose loop it mirrors.
    """
    from lightning.fabric.plugins.precision.precision import Precision as FabricPrecision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy, Strategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    strategy = trainer.strategy
    if type(strategy) is not SingleDeviceStrategy or (
        type(strategy).on_train_batch_start is not Strategy.on_train_batch_start
    ):
        return f"strategy {type(strategy).__name__}"
    if type(trainer.precision_plugin).convert_input is not FabricPrecision.convert_input:
        return f"precision plugin {type(trainer.precision_plugin).__name__} converts inputs"
    if not isinstance(trainer.profiler, PassThroughProfiler):  # lit_gpu's NoProfiler is one too
        return f"profiler {type(trainer.profiler).__name__}"
    if not pl_module.automatic_optimization:
        return "manual optimization"
    selector = trainer._data_connector._datahook_selector  # private (pinned)
    for hook in TRANSFER_HOOKS:
        owner = selector.get_instance(hook) if selector is not None else pl_module
        if is_overridden(hook, owner):
            return f"{type(owner).__name__} overrides {hook}"
    if mirrored_source_digest() != MIRRORED_SOURCE:
        return f"Lightning {pl.__version__}'s training loop is not the one the lean batch mirrors"
    return None


class LeanTrainingBatch(FitPatch):
    """Runs each plain training batch's glue without Lightning's dispatch layers, where nothing can tell.

    Added by the ``lit-gpu`` CLI after :class:`~lit_gpu.callbacks.step_path.LeanOptimizerStep`, which
    takes the optimizer step itself. For this fit only it sets ``advance`` and ``on_advance_end`` on the
    epoch loop instance (removed at ``on_train_end``/``teardown``). Per batch it does what Lightning's
    do: fetch, move the batch to the device, ``on_train_batch_start`` (callbacks, then the module; a
    module returning -1 ends the epoch), ``training_step`` with the optimizer step, LR schedulers,
    ``on_train_batch_end``, the logger connector's batch metrics and log steps, the validation check and
    the SIGTERM check; the hooks reach the callbacks and module that implement them, with
    ``_current_fx_name`` set as Lightning's dispatch sets it. ``tests/unit/test_upstream_pins.py`` pins
    the internals it reads.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lean: _LeanBatch | None = None

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()
        self.blocker = lean_batch_blocker(trainer, pl_module)
        if self.blocker is not None:
            return
        epoch_loop = trainer.fit_loop.epoch_loop
        self._lean = lean = _LeanBatch(trainer, epoch_loop)
        self._patch(epoch_loop, "advance", lean.advance)
        self._patch(epoch_loop, "on_advance_end", lean.on_advance_end)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._lean is not None:
            self._lean.new_epoch()

    @override
    def _restore(self) -> None:
        super()._restore()
        self._lean = None


class _LeanBatch:
    """One fit's lean ``_TrainingEpochLoop.advance`` and ``on_advance_end``."""

    def __init__(self, trainer: pl.Trainer, loop: Any) -> None:
        from lightning.fabric.utilities.apply_func import _BLOCKING_DEVICE_TYPES
        from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher
        from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

        self.trainer, self.loop = trainer, loop
        self.module = trainer.lightning_module
        self.strategy = trainer.strategy
        self.connector = trainer._logger_connector
        self.device = self.strategy.root_device
        self.non_blocking = self.device.type not in _BLOCKING_DEVICE_TYPES
        self.plain_fetcher = _PrefetchDataFetcher
        self.advance_lightning = _TrainingEpochLoop.advance.__get__(loop)
        self.on_advance_end_lightning = _TrainingEpochLoop.on_advance_end.__get__(loop)
        self.val_this_epoch = True  # unknown until new_epoch(): ask Lightning
        self.hooks = HookDispatch(trainer, self.module)
        #: progress-bar name -> (the step-value tensor last converted, its number): _batch_metrics
        self._pbar_seen: dict[str, tuple[torch.Tensor, Any]] = {}

    def new_epoch(self) -> None:
        """Whether this epoch validates at all (Lightning's ``_should_check_val_epoch``: fixed per epoch)."""
        self.val_this_epoch = self.loop._should_check_val_epoch()

    def _to_device(self, batch: Any) -> Any:
        """Lightning's default transfer hooks: ``move_data_to_device(batch, root_device)``, a plain tuple or
        list of tensors moved without its collection walk."""
        kind = type(batch)
        if kind is tuple or kind is list:
            device, non_blocking, moved = self.device, self.non_blocking, []
            for t in batch:  # a loop, not a comprehension: one Python call fewer per tensor
                if not isinstance(t, torch.Tensor):
                    break
                moved.append(t.to(device, non_blocking=True) if non_blocking else t.to(device))
            else:
                return kind(moved)
        from lightning.fabric.utilities.apply_func import move_data_to_device

        return move_data_to_device(batch, self.device)

    # ---- the loop --------------------------------------------------------------------------------
    def advance(self, data_fetcher: Any) -> None:
        loop, trainer = self.loop, self.trainer
        if (
            loop._restarting
            or type(data_fetcher) is not self.plain_fetcher
            or trainer.accumulate_grad_batches != 1
        ):
            return self.advance_lightning(data_fetcher)
        loop.val_loop.restarting = False
        batch, _, __ = next(data_fetcher)
        progress = loop.batch_progress
        batch_idx = progress.current.ready  # Lightning's self.batch_idx + 1
        progress.is_last_batch = data_fetcher.done
        batch = self._to_device(batch)  # convert_input: the identity here (lean_batch_blocker)
        progress.increment_ready()
        connector, results = self.connector, loop._results
        # the logger connector's on_batch_start
        if connector._first_loop_iter is None:
            connector._first_loop_iter = True
        elif connector._first_loop_iter is True:
            connector._first_loop_iter = False
        results.batch, results.batch_size, results.dataloader_idx = batch, None, None

        batch_output = None
        skip_rest_of_epoch = False
        if batch is None:
            loop._warning_cache.warn(
                "train_dataloader yielded None. If this was on purpose, ignore this warning..."
            )
        else:
            response = self.hooks("on_train_batch_start", batch, batch_idx)  # callbacks, then the module
            # the strategy's on_train_batch_start is Lightning's no-op (lean_batch_blocker)
            skip_rest_of_epoch = response == -1
            if skip_rest_of_epoch:
                progress.increment_by(0, is_last_batch=True)
            else:
                progress.increment_started()
                kwargs = loop._build_kwargs(OrderedDict(), batch, batch_idx)
                batch_output = loop.automatic_optimization.run(trainer.optimizers[0], batch_idx, kwargs)
        progress.increment_processed()

        if self.strategy.lr_scheduler_configs:  # none: Lightning's update finds nothing to do
            loop.update_lr_schedulers("step", update_plateau_schedulers=False)
            if loop._num_ready_batches_reached():
                loop.update_lr_schedulers("epoch", update_plateau_schedulers=False)
        if skip_rest_of_epoch:
            raise StopIteration

        self.hooks("on_train_batch_end", batch_output, batch, batch_idx)
        # the logger connector's on_batch_end
        metrics = self._batch_metrics(results, connector._first_loop_iter is not None)
        connector._progress_bar_metrics.update(metrics["pbar"])
        connector._callback_metrics.update(metrics["callback"])
        connector._logged_metrics.update(metrics["log"])
        results.batch = results.batch_size = None
        progress.increment_completed()
        # the logger connector's update_train_step_metrics (no accumulation: this step optimizes)
        every = trainer.log_every_n_steps
        if (every != 0 and ((loop._batches_that_stepped + 1) % every == 0 or trainer.should_stop)) or (
            trainer.fast_dev_run
        ):
            connector.log_metrics(results.metrics(connector._first_loop_iter is not None)["log"])
        return None

    def _batch_metrics(self, results: Any, on_step: bool) -> dict[str, dict[str, Any]]:
        """``results.metrics(on_step)`` with each progress-bar number converted once per logged value.

        Lightning converts every progress-bar value to a Python number after every batch
        (``convert_tensors_to_scalars``: ``.item()``), also one logged steps ago and unchanged since: on
        a GPU a host-device synchronization per step that stalls the queue. A step value's tensor is
        replaced at each ``self.log`` (``_ResultMetric._forward_cache``: a fresh clone, never written in
        place), so while the same tensor is there the number converted from it is reused.
        """
        metrics: dict[str, dict[str, Any]] = {"callback": {}, "log": {}, "pbar": {}}
        seen, numbers = self._pbar_seen, {}
        for _, result_metric in results.valid_items():
            value = results._get_cache(result_metric, on_step)
            if not isinstance(value, torch.Tensor):
                continue
            name, forked_name = results._forked_name(result_metric, on_step)
            meta = result_metric.meta
            if meta.logger:
                metrics["log"][forked_name] = value
            if results.training or meta.on_epoch and not on_step:
                metrics["callback"][name] = value
                metrics["callback"][forked_name] = value
            if meta.prog_bar:
                source = result_metric._forward_cache if on_step and meta.on_step else None
                known = seen.get(forked_name)
                if source is not None and known is not None and known[0] is source:
                    number = known[1]
                else:
                    number = apply_func.convert_tensors_to_scalars(value)
                metrics["pbar"][forked_name] = number
                if source is not None:
                    numbers[forked_name] = (source, number)
        self._pbar_seen = numbers
        return metrics

    def on_advance_end(self, data_fetcher: Any) -> None:
        loop, trainer = self.loop, self.trainer
        if (
            loop._skip_next_val
            or trainer.should_stop
            or trainer.accumulate_grad_batches != 1
            or self._plateau_scheduler()
            or self._validates_now(data_fetcher)
        ):
            return self.on_advance_end_lightning(data_fetcher)
        # Lightning's update_lr_schedulers("step", update_plateau_schedulers=True) here updates only
        # ReduceLROnPlateau schedulers (handed to Lightning above); the others stepped in advance
        loop._batches_that_stepped += 1  # no accumulation: this batch stepped
        # loggers are saved here only when should_stop (handed to Lightning above)
        if trainer.received_sigterm and not loop._is_training_done:
            from lightning.pytorch.utilities.exceptions import SIGTERMException

            raise SIGTERMException
        return None

    def _plateau_scheduler(self) -> bool:
        """Whether a ``ReduceLROnPlateau``-style scheduler is configured (they update after validation)."""
        return any(config.reduce_on_plateau for config in self.strategy.lr_scheduler_configs)

    def _validates_now(self, data_fetcher: Any) -> bool:
        """Whether validation may run after this batch; True hands the decision to Lightning."""
        if not self.val_this_epoch:
            return False
        trainer, progress = self.trainer, self.loop.batch_progress
        every = trainer.val_check_batch
        if (
            progress.is_last_batch
            or trainer._val_check_time_interval is not None
            or trainer.check_val_every_n_epoch is None
            or not isinstance(every, int)
            or type(data_fetcher) is not self.plain_fetcher
        ):
            return True
        return progress.current.ready % every == 0  # Lightning: (batch_idx + 1) % val_check_batch == 0
