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
``on_advance_end``. It also gives the loop a ``run`` whose stop test reads the counters directly,
takes a batch of one sized loader straight from its iterator (moving the fetcher's counters), and
gives the training result collection a ``log`` that does not move a metric already on the value's
device there again (:class:`~lit_gpu.fastpath.batch.LeanLog`). The copy is tied to the Lightning
source it mirrors: where the installed Lightning's methods differ from it, the callback stands aside.
When it stands aside for a fit: :func:`~lit_gpu.fastpath.hooks.lean_batch_blocker`.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities import apply_func
from typing_extensions import override

from lit_gpu.fastpath.hooks import (
    TRANSFER_HOOKS,
    FitPatch,
    HookDispatch,
    fast_path_problem,
    lean_batch_blocker,
    transfer_hooks_overridden,
)


class LeanTrainingBatch(FitPatch):
    """Runs each plain training batch's glue without Lightning's dispatch layers, where nothing can tell.

    Added by the ``lit-gpu`` CLI after :class:`~lit_gpu.fastpath.step.LeanOptimizerStep`, which
    takes the optimizer step itself. For this fit only it sets ``run``, ``advance`` and ``on_advance_end``
    on the epoch loop instance and ``log`` on its result collection (removed at ``on_train_end``,
    ``teardown`` or ``on_exception``). Per batch it does what Lightning's
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
        self.blocker = fast_path_problem(trainer) or lean_batch_blocker(trainer, pl_module)
        if self.blocker is not None:
            return
        epoch_loop = trainer.fit_loop.epoch_loop
        self._lean = lean = _LeanBatch(trainer, epoch_loop)
        self._patch(epoch_loop, "run", lean.run)
        self._patch(epoch_loop, "advance", lean.advance)
        self._patch(epoch_loop, "on_advance_end", lean.on_advance_end)
        results = epoch_loop._results
        self._patch(results, "log", LeanLog(results).log)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._lean is not None:
            self._lean.new_epoch()

    @override
    def _restore(self) -> None:
        super()._restore()
        self._lean = None


class _LeanBatch:
    """One fit's lean ``_TrainingEpochLoop.run``, ``advance`` and ``on_advance_end``."""

    def __init__(self, trainer: pl.Trainer, loop: Any) -> None:
        from lightning.fabric.utilities.apply_func import _BLOCKING_DEVICE_TYPES
        from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher
        from lightning.pytorch.loops.loop import _Loop
        from lightning.pytorch.loops.progress import _ProcessedTracker
        from lightning.pytorch.loops.training_epoch_loop import RestartStage, _TrainingEpochLoop
        from lightning.pytorch.trainer.call import _call_strategy_hook

        self.trainer, self.loop = trainer, loop
        self.module = trainer.lightning_module
        self.strategy = trainer.strategy
        self.connector = trainer._logger_connector
        self.device = self.strategy.root_device
        self.non_blocking = self.device.type not in _BLOCKING_DEVICE_TYPES
        #: a transfer hook of the module or data module (GPU augmentation): Lightning's calls, not _to_device
        self.own_transfer = transfer_hooks_overridden(trainer, self.module)
        self.call_strategy_hook = _call_strategy_hook
        self.plain_fetcher = _PrefetchDataFetcher
        self.advance_lightning = _TrainingEpochLoop.advance.__get__(loop)
        self.on_advance_end_lightning = _TrainingEpochLoop.on_advance_end.__get__(loop)
        self.no_restart_stage = RestartStage.NONE
        self.val_this_epoch = True  # unknown until new_epoch(): ask Lightning
        self.hooks = HookDispatch(trainer, self.module)
        #: progress-bar name -> (the step-value tensor last converted, its number): _batch_metrics
        self._pbar_seen: dict[str, tuple[torch.Tensor, Any]] = {}
        #: what _batch_metrics last read from the result collection, and what it made of it
        self._metrics_read: list[Any] | None = None
        self._metrics: dict[str, dict[str, Any]] = {}
        # the counters are the trackers Lightning's loop makes (moved here without its type checks)
        self.plain_progress = isinstance(loop.batch_progress.total, _ProcessedTracker)
        # ``val_loop.restarting = False`` changes nothing when it is False already and has no child loops
        self.val_children = any(isinstance(v, _Loop) for v in vars(loop.val_loop).values())
        #: the sized single loader's iterator cycle _fetch reads from (None: Lightning's fetcher)
        self._cycle: Any = None
        self._direct: bool = False

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
                if t.device == device:  # what .to(device) returns then, without its argument parsing
                    moved.append(t)
                else:
                    moved.append(t.to(device, non_blocking=True) if non_blocking else t.to(device))
            else:
                return kind(moved)
        from lightning.fabric.utilities.apply_func import move_data_to_device

        return move_data_to_device(batch, self.device)

    # ---- the loop --------------------------------------------------------------------------------
    def run(self, data_fetcher: Any) -> None:
        """``_TrainingEpochLoop.run``, its stop test read without a dozen property calls."""
        loop = self.loop
        loop.reset()
        loop.on_run_start(data_fetcher)
        none = self.no_restart_stage
        while not self._done():
            try:
                loop.advance(data_fetcher)
                loop.on_advance_end(data_fetcher)
            except StopIteration:
                break
            finally:  # _Loop.on_iteration_done with the epoch loop's reset_restart_stage
                loop._restarting = False
                loop._loaded_from_state_dict = False
                loop._resuming_from_checkpoint = False
                loop._restart_stage = none

    def _done(self) -> bool:
        """``_TrainingEpochLoop.done`` (a stop request goes to Lightning's, for its ``min_epochs`` rule).

        ``global_step`` is the optimizer steps' count: the lean batch runs automatic optimization only.
        """
        loop, trainer = self.loop, self.trainer
        if trainer.should_stop:
            return loop.done
        progress = loop.batch_progress
        max_steps = loop.max_steps
        steps = loop.automatic_optimization.optim_progress.optimizer.step.total  # global_step: its .completed
        training_done = (
            (max_steps != -1 and steps.completed >= max_steps)
            or progress.current.ready == trainer.fit_loop.max_batches
            or progress.is_last_batch
        )
        return training_done and (not loop._restarting or loop.val_loop._has_run)

    def _fetch(self, data_fetcher: Any) -> Any:
        """``next(data_fetcher)``'s batch; from a sized single loader without the fetcher's layers.

        Lightning's ``_PrefetchDataFetcher`` prefetches nothing when the loader has a length, and its
        ``CombinedLoader`` then takes the next batch of the one loader and counts it: done here, with
        the same counters (``fetched``, ``done``, the cycle's index), the profiler hooks left out
        (``PassThroughProfiler``'s do nothing: lean_batch_blocker).
        """
        cycle = getattr(data_fetcher.iterator, "_iterator", None)
        if cycle is not self._cycle:
            self._cycle, self._direct = cycle, _single_sized_cycle(data_fetcher, cycle)
        if not self._direct or data_fetcher.batches or data_fetcher.length is None:
            return next(data_fetcher)[0]
        try:
            batch = next(cycle.iterators[0])
        except StopIteration:
            cycle._consumed[0] = True
            data_fetcher.done = True
            raise
        cycle._idx += 1
        data_fetcher.fetched += 1
        data_fetcher.done = data_fetcher.fetched >= data_fetcher.length
        return batch

    def advance(self, data_fetcher: Any) -> None:
        loop, trainer = self.loop, self.trainer
        if (
            loop._restarting
            or type(data_fetcher) is not self.plain_fetcher
            or trainer.accumulate_grad_batches != 1
            or not self.plain_progress
        ):
            return self.advance_lightning(data_fetcher)
        val_loop = loop.val_loop
        if val_loop._restarting or self.val_children:
            val_loop.restarting = False
        batch = self._fetch(data_fetcher)
        progress = loop.batch_progress
        total, current = progress.total, progress.current
        batch_idx = current.ready  # Lightning's self.batch_idx + 1
        progress.is_last_batch = data_fetcher.done
        # convert_input: the identity here (lean_batch_blocker); then Lightning's transfer calls, or, where
        # the module and data module keep Lightning's transfer hooks, the move they make
        if self.own_transfer:
            batch = self.module._on_before_batch_transfer(batch, dataloader_idx=0)
            batch = self.call_strategy_hook(trainer, "batch_to_device", batch, dataloader_idx=0)
        else:
            batch = self._to_device(batch)
        total.ready += 1  # progress.increment_ready()
        current.ready += 1
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
                total.started += 1  # progress.increment_started()
                current.started += 1
                kwargs = loop._build_kwargs(OrderedDict(), batch, batch_idx)
                batch_output = loop.automatic_optimization.run(self.strategy.optimizers[0], batch_idx, kwargs)
        total.processed += 1  # progress.increment_processed()
        current.processed += 1

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
        total.completed += 1  # progress.increment_completed()
        current.completed += 1
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
        place), so while the same tensor is there the number converted from it is reused. On a step
        whose result collection holds the same metrics, step values, metadata and reset flags as at the
        last call (nothing was logged since), the step metrics are the ones made then.
        """
        read: list[Any] = [results.dataloader_idx]
        for value in results.values():
            read += (
                value,
                getattr(value, "_forward_cache", None),
                getattr(value, "meta", None),
                getattr(value, "has_reset", None),
            )
        last = self._metrics_read
        if on_step and last is not None and len(last) == len(read) and all(map(operator.is_, read, last)):
            return self._metrics
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
        self._metrics_read, self._metrics = (read if on_step else None), metrics
        return metrics

    def on_advance_end(self, data_fetcher: Any) -> None:
        loop, trainer = self.loop, self.trainer
        if (
            loop._skip_next_val
            or trainer.should_stop
            or trainer.accumulate_grad_batches != 1
            or (self.strategy.lr_scheduler_configs and self._plateau_scheduler())
            or (self.val_this_epoch and self._validates_now(data_fetcher))
        ):
            return self.on_advance_end_lightning(data_fetcher)
        # Lightning's update_lr_schedulers("step", update_plateau_schedulers=True) here updates only
        # ReduceLROnPlateau schedulers (handed to Lightning above); the others stepped in advance
        loop._batches_that_stepped += 1  # no accumulation: this batch stepped
        # loggers are saved here only when should_stop (handed to Lightning above)
        if trainer._signal_connector.received_sigterm and not loop._is_training_done:
            from lightning.pytorch.utilities.exceptions import SIGTERMException

            raise SIGTERMException
        return None

    def _plateau_scheduler(self) -> bool:
        """Whether a ``ReduceLROnPlateau``-style scheduler is configured (they update after validation)."""
        return any(config.reduce_on_plateau for config in self.strategy.lr_scheduler_configs)

    def _validates_now(self, data_fetcher: Any) -> bool:
        """Whether validation may run after this batch (this epoch validates); True hands the decision
        to Lightning."""
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


def _single_sized_cycle(data_fetcher: Any, cycle: Any) -> bool:
    """Whether ``data_fetcher`` draws from one loader with a length through Lightning's ``max_size_cycle``
    mode, unflattened to the batch itself (what :meth:`_LeanBatch._fetch` reproduces)."""
    from lightning.pytorch.utilities._pytree import tree_unflatten
    from lightning.pytorch.utilities.combined_loader import CombinedLoader, _MaxSizeCycle

    combined = data_fetcher.iterator
    if type(combined) is not CombinedLoader or type(cycle) is not _MaxSizeCycle or len(cycle.iterators) != 1:
        return False
    marker = object()
    return tree_unflatten([marker], combined._spec) is marker


# ---- a value logged again where it was ------------------------------------------------------------
class LeanLog:
    """``_ResultCollection.log`` of the training loop, for a value logged again on the device it was.

    Lightning's ``log`` moves the stored metric to the value's device at every call
    (``_ResultMetric.to``: a walk over the metric's whole ``__dict__`` that deep-copies its metadata,
    ~600 Python calls). Once the metric is there that move changes nothing, so this skips it when the
    key exists with the same arguments (the stored metadata is the one Lightning made for them) and
    the metric's state is on the value's device; anything else is Lightning's ``log``.
    """

    def __init__(self, results: Any) -> None:
        from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection

        self.results = results
        self.lightning = _ResultCollection.log.__get__(results)
        #: key -> (the arguments it was last logged with by Lightning, the metric and its metadata then)
        self._known: dict[str, tuple[dict[str, Any], Any, Any]] = {}
        #: what replaces ``results.log``: like Lightning's, not traced by dynamo
        self.log = torch.compiler.disable(self._log)

    def _log(self, fx: str, name: str, value: Any, **kwargs: Any) -> None:
        results = self.results
        key = f"{fx}.{name}"
        known = self._known.get(key)
        if (
            known is not None
            and type(value) is torch.Tensor
            and results.dataloader_idx is None
            and known[0] == kwargs
            and not kwargs.get("enable_graph", False)
        ):
            metric = results.get(key)
            if (
                metric is known[1]
                and metric.meta is known[2]
                and metric.is_tensor
                and metric.value.device == value.device
            ):
                value = value.detach()  # recursive_detach of a tensor
                batch_size = results._extract_batch_size(metric, kwargs.get("batch_size"), metric.meta)
                results.update_metrics(key, value, batch_size)
                return
        self.lightning(fx, name, value, **kwargs)
        metric = results.get(key)
        self._known[key] = (dict(kwargs), metric, getattr(metric, "meta", None))


__all__ = [
    "TRANSFER_HOOKS",
    "LeanLog",
    "LeanTrainingBatch",
    "lean_batch_blocker",
]
