# ruff: noqa: E501
"""What lit_gpu reaches in its upstreams (Lightning, torch, torchmetrics, jsonargparse, optuna), declared in
one module (model: Lightning's ``fabric/utilities/imports.py``).

* the table (:data:`FEATURES`): every private upstream name lit_gpu reaches, by feature, with the lit_gpu
  modules that may reach it (its users, wherever they sit) and the tests that pin it; the digest of every
  Lightning function lit_gpu mirrors (:data:`DIGESTS`). tests/unit/upstream/test_declared.py lints the source
  against it (a private upstream name reached anywhere in lit_gpu is declared here, with that module among
  its users) and tests/unit/test_upstream_pins.py holds each name's behaviour (``Feature.pins``).
* the gate (:func:`stands_aside`): the check at run time. On a mismatch that feature alone stands aside
  with one line, once per process, and stock Lightning runs; a feature that keeps a promise says it cannot
  stand aside, and its test is the judge.

  Gated features (the keys of ``FEATURES``; * keeps a promise, it cannot stand aside): fast path; capture;
  fresh last; removal guard*; whole steps*; exact resume*; logging state; validation steps; hook name;
  anomaly check; allocator setting; scheduler children; interrupt*; loader replay*; cluster resume*; torch
  zip reader*; config reading*; sweep trial ids*; step log check; dp*; one-subcommand parse; config
  decides*; own CLI path*.
* the accessors several rooms share (Lightning's loop, trainer and module state; torch's hooks; the parser
  tools' private names). A shim with one user sits beside it (``lit_gpu.cli.lightning_cli``,
  ``lit_gpu.strategies.dp``, ``lit_gpu.resume.plain``, ``lit_gpu.resume.state``,
  ``lit_gpu.checkpoints.scan``).

Digests: SHA-256 (16 hex digits) of each mirrored function's source, taken on Lightning 2.6.6 with
:func:`take_digests` (whoever re-checks the copies against a new release re-takes them). A release inside
pyproject.toml's range whose copy of a function differs from 2.6.6's in code lit_gpu does not mirror has its
digest in :data:`EARLIER`, with the release and the difference (re-checked by hand, one by one).

To support a new Lightning: run ``.ci/lightning_tests.py --tier full`` on it, re-take the digests and
signatures of what changed (and re-check the code that mirrors it), then move :data:`VERIFIED_UP_TO`.

The fast path (lit_gpu's lean training loop) is its own package, :mod:`lit_gpu.fastpath`. Importing this
module imports neither torch nor Lightning; each function imports what it uses.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lit_gpu import messages

# ==== the table: every private upstream name lit_gpu reaches, by feature ====================================


@dataclass(frozen=True)
class Feature:
    """What one feature depends on upstream, and what runs where it stands aside."""

    name: str
    #: what runs instead, as stock Lightning does it (after "stands aside, ")
    instead: str
    #: "module:Qual.name" of every function whose behaviour it reproduces (a digest each in DIGESTS)
    mirrored: tuple[str, ...] = ()
    #: "module:Class.name" -> the signature ``str(inspect.signature(...))`` of a function, or None for an
    #: attribute (present on the class, or set as ``self.name`` in its source)
    private: dict[str, str | None] = field(default_factory=dict)
    #: private keys it reads in upstream's dicts (a checkpoint's, hyper-parameters'): not checkable here,
    #: each pinned by a test in tests/unit/test_upstream_pins.py
    keys: tuple[str, ...] = ()
    #: torch release ranges ((first, last), ...) it was verified on, each inclusive; None: any
    torch: tuple[tuple[str, str], ...] | None = None
    #: set where it cannot stand aside: the promise it keeps
    promise: str | None = None
    #: the lit_gpu modules that may reach its private names ("lit_gpu.x.y"; "lit_gpu.x.*": a whole package)
    users: tuple[str, ...] = ()
    #: the tests that pin its upstream behaviour ("path/under/tests.py::test_name")
    pins: tuple[str, ...] = ()


DIGESTS: dict[str, str] = {
    "lightning.pytorch.callbacks.model_checkpoint:ModelCheckpoint.on_train_batch_end": "71bdc73ce42b95b3",
    "lightning.pytorch.cli:LightningCLI._add_subcommands": "c1156fb114742aca",
    "lightning.pytorch.core.module:LightningModule.backward": "798293b0ae8ef5ac",
    "lightning.pytorch.core.module:LightningModule.optimizer_step": "f07278673bfab100",
    "lightning.pytorch.core.module:LightningModule.optimizer_zero_grad": "9edadf25870ba0ea",
    "lightning.pytorch.core.optimizer:LightningOptimizer.step": "a080b1c57c3ad579",
    "lightning.pytorch.loops.fit_loop:_FitLoop.setup_data": "77855202334401d5",
    "lightning.pytorch.loops.fetchers:_DataFetcher.__next__": "0d13131ad3567bc9",
    "lightning.pytorch.loops.fetchers:_PrefetchDataFetcher.__next__": "8611192d7629f911",
    "lightning.pytorch.loops.loop:_Loop.on_iteration_done": "e30c5339d69d6279",
    "lightning.pytorch.loops.loop:_Loop.restarting": "0e5d3126178508ef",
    "lightning.pytorch.loops.optimization.automatic:Closure.closure": "9fb9a0ba9c7be69a",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization._make_backward_fn": "638ca477b2752682",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization._make_closure": "b4bd45349b04051c",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization._make_step_fn": "91e40ee2d539156a",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization._make_zero_grad_fn": "0f9b56ff1dc1a3ba",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization._optimizer_step": "e196b2fa15d19ee6",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization._optimizer_zero_grad": "abd5876aaf91ee7d",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization._training_step": "72e8f9529eacba73",
    "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization.run": "385b43732ecc8af3",
    "lightning.pytorch.loops.progress:_OptimizationProgress.optimizer_steps": "6707e97a882bd812",
    "lightning.pytorch.loops.progress:_Progress.increment_completed": "b62bc9433f2a4c97",
    "lightning.pytorch.loops.progress:_Progress.increment_processed": "988328850113b244",
    "lightning.pytorch.loops.progress:_Progress.increment_ready": "1b90bbf1451cc4cb",
    "lightning.pytorch.loops.progress:_Progress.increment_started": "0d87178077ad4a49",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop._build_kwargs": "4a80f7e4608b7539",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop._is_training_done": "b6a4cafb8900bfd0",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop._is_validation_done": "965ea84e3c59e136",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop._num_ready_batches_reached": "d51c52199e57a7a6",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop._should_accumulate": "5482f0c6d473fd66",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop._should_check_val_fx": "cf0916b12e18a2cc",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop.advance": "c7555c016027bd73",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop.done": "ba06fbd80fe37b2e",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop.global_step": "bf52466f94cc0a9d",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop.on_advance_end": "2d1ddaa4e45ef5c6",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop.reset_restart_stage": "3915aa4ec9367a5f",
    "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop.run": "e8393a2170ccbe01",
    "lightning.pytorch.loops.utilities:_is_max_limit_reached": "477644e73f0193f7",
    "lightning.pytorch.plugins.precision.precision:Precision._wrap_closure": "2d25ccda9ac5fcdc",
    "lightning.pytorch.plugins.precision.precision:Precision.backward": "c45a6fcf5963eb17",
    "lightning.pytorch.plugins.precision.precision:Precision.optimizer_step": "868b323ae6271f88",
    "lightning.pytorch.strategies.strategy:Strategy.backward": "627cfe60660857e3",
    "lightning.pytorch.strategies.strategy:Strategy.optimizer_step": "ff24a5097b2683a7",
    "lightning.pytorch.strategies.strategy:Strategy.training_step": "e0755d72cd8b74f0",
    "lightning.pytorch.trainer.connectors.logger_connector.logger_connector:_LoggerConnector.on_batch_end": "87c0a9cd43e97f9d",
    "lightning.pytorch.trainer.connectors.logger_connector.logger_connector:_LoggerConnector.on_batch_start": "5022a98e255d31b5",
    "lightning.pytorch.trainer.connectors.logger_connector.logger_connector:_LoggerConnector.should_update_logs": "a60ba9e9cd0c62d9",
    "lightning.pytorch.trainer.connectors.logger_connector.logger_connector:_LoggerConnector.update_train_step_metrics": "44584c0c55de3464",
    "lightning.pytorch.trainer.connectors.logger_connector.result:_ResultCollection._extract_batch_size": "29b3cd814c0df881",
    "lightning.pytorch.trainer.connectors.logger_connector.result:_ResultCollection.log": "57ea91856621d155",
    "lightning.pytorch.trainer.connectors.logger_connector.result:_ResultCollection.metrics": "253a052f55f98a76",
    "lightning.pytorch.trainer.connectors.logger_connector.result:_ResultCollection.update_metrics": "61e950f1f1d25eea",
    "lightning.pytorch.trainer.connectors.logger_connector.result:_ResultMetric.to": "f45ccd7696961427",
    "lightning.pytorch.trainer.trainer:Trainer.num_training_batches": "dbe2900bd640e943",
    "lightning.pytorch.trainer.trainer:Trainer.received_sigterm": "9cb95dccef01d275",
    "lightning.pytorch.utilities.combined_loader:CombinedLoader.__next__": "6208793dc22dddf6",
    "lightning.pytorch.utilities.combined_loader:_MaxSizeCycle.__next__": "b71ceef48cfb5058",
}

#: "module:Qual.name" -> {releases: digest} for earlier releases in pyproject.toml's range whose source
#: differs from 2.6.6's outside what lit_gpu relies on (the digest taken the same way, from that release).
EARLIER: dict[str, dict[str, str]] = {
    # 2.6.0-2.6.1: the check that val_check_batch fits the epoch did not yet skip limit_val_batches=0; the
    # order loader replay relies on (the loaders built, their states loaded, then the iterator) is 2.6.6's
    "lightning.pytorch.loops.fit_loop:_FitLoop.setup_data": {"2.6.0-2.6.1": "8037b7b64279ab4d"},
}

_EPOCH = "lightning.pytorch.loops.training_epoch_loop:_TrainingEpochLoop"
_AUTO = "lightning.pytorch.loops.optimization.automatic:_AutomaticOptimization"
_LOGGER = "lightning.pytorch.trainer.connectors.logger_connector.logger_connector:_LoggerConnector"
_RESULT = "lightning.pytorch.trainer.connectors.logger_connector.result"
_METADATA = f"{_RESULT}._Metadata"  # (as a signature names the type)
_PROGRESS = "lightning.pytorch.loops.progress"
_CKPT = "lightning.pytorch.callbacks.model_checkpoint:ModelCheckpoint"
_EVAL = "lightning.pytorch.loops.evaluation_loop:_EvaluationLoop"
_CONNECTORS = "lightning.pytorch.trainer.connectors"
_TRAINER = "pl.Trainer"  # (annotation text as Lightning writes it)

#: the Lightning functions whose behaviour the lean batch (``batch_path``) reproduces
BATCH_MIRRORED = (
    f"{_EPOCH}.advance", f"{_EPOCH}.on_advance_end", f"{_EPOCH}._should_check_val_fx",
    f"{_EPOCH}._should_accumulate", f"{_LOGGER}.on_batch_start", f"{_LOGGER}.on_batch_end",
    f"{_LOGGER}.update_train_step_metrics", f"{_LOGGER}.should_update_logs",
    f"{_RESULT}:_ResultCollection.metrics",
    # the epoch loop's run and its stop test (_LeanBatch.run)
    f"{_EPOCH}.run", f"{_EPOCH}.done", f"{_EPOCH}._is_training_done", f"{_EPOCH}._is_validation_done",
    f"{_EPOCH}.global_step", f"{_PROGRESS}:_OptimizationProgress.optimizer_steps",
    f"{_EPOCH}._num_ready_batches_reached", f"{_EPOCH}.reset_restart_stage",
    "lightning.pytorch.loops.loop:_Loop.on_iteration_done", "lightning.pytorch.loops.loop:_Loop.restarting",
    "lightning.pytorch.loops.utilities:_is_max_limit_reached",
    "lightning.pytorch.trainer.trainer:Trainer.num_training_batches",
    "lightning.pytorch.trainer.trainer:Trainer.received_sigterm",
    # the progress counters (_LeanBatch.advance moves them itself)
    f"{_PROGRESS}:_Progress.increment_ready", f"{_PROGRESS}:_Progress.increment_started",
    f"{_PROGRESS}:_Progress.increment_processed", f"{_PROGRESS}:_Progress.increment_completed",
    # the fetch from a sized loader (_LeanBatch._fetch)
    "lightning.pytorch.loops.fetchers:_PrefetchDataFetcher.__next__",
    "lightning.pytorch.loops.fetchers:_DataFetcher.__next__",
    "lightning.pytorch.utilities.combined_loader:CombinedLoader.__next__",
    "lightning.pytorch.utilities.combined_loader:_MaxSizeCycle.__next__",
    # a value logged again (_LeanLog)
    f"{_RESULT}:_ResultCollection.log", f"{_RESULT}:_ResultCollection.update_metrics",
    f"{_RESULT}:_ResultCollection._extract_batch_size", f"{_RESULT}:_ResultMetric.to",
)  # fmt: skip

#: the Lightning functions whose behaviour the lean optimizer step and the capture reproduce
STEP_MIRRORED = (
    f"{_AUTO}.run", f"{_AUTO}._make_closure", f"{_AUTO}._make_step_fn", f"{_AUTO}._make_zero_grad_fn",
    f"{_AUTO}._make_backward_fn", f"{_AUTO}._optimizer_step", f"{_AUTO}._optimizer_zero_grad",
    f"{_AUTO}._training_step", "lightning.pytorch.loops.optimization.automatic:Closure.closure",
    f"{_EPOCH}._build_kwargs", "lightning.pytorch.core.optimizer:LightningOptimizer.step",
    "lightning.pytorch.core.module:LightningModule.optimizer_step",
    "lightning.pytorch.core.module:LightningModule.optimizer_zero_grad",
    "lightning.pytorch.core.module:LightningModule.backward",
    "lightning.pytorch.strategies.strategy:Strategy.optimizer_step",
    "lightning.pytorch.strategies.strategy:Strategy.training_step",
    "lightning.pytorch.strategies.strategy:Strategy.backward",
    "lightning.pytorch.plugins.precision.precision:Precision.optimizer_step",
    "lightning.pytorch.plugins.precision.precision:Precision._wrap_closure",
    "lightning.pytorch.plugins.precision.precision:Precision.backward",
)  # fmt: skip

_CANDIDATES = f"(self, trainer: '{_TRAINER}', monitor_candidates: dict[str, torch.Tensor]) -> None"

FEATURES: dict[str, Feature] = {
    "fast path": Feature(
        "lit_gpu's fast training loop",
        "Lightning's own loop runs",
        mirrored=BATCH_MIRRORED + STEP_MIRRORED,
        private={
            f"{_AUTO}.run": None,
            f"{_LOGGER}._first_loop_iter": None,
            "lightning.pytorch.loops.optimization.closure:AbstractClosure.consume_result": None,
            f"{_EPOCH}._batches_that_stepped": None,
            f"{_RESULT}:_ResultMetric.to": None,
            # read or moved by the lean batch and step (batch_path, step_path, hooks, blockers)
            "lightning.fabric.utilities.apply_func:_BLOCKING_DEVICE_TYPES": None,
            f"{_PROGRESS}:_ProcessedTracker": None,
            f"{_PROGRESS}:_StartedTracker": None,
            f"{_LOGGER}._callback_metrics": None,
            f"{_LOGGER}._logged_metrics": None,
            f"{_LOGGER}._progress_bar_metrics": None,
            f"{_RESULT}:_ResultCollection._get_cache": None,
            f"{_RESULT}:_ResultCollection._forked_name": None,
            "torchmetrics.metric:Metric._forward_cache": None,
            "lightning.pytorch.loops.loop:_Loop._restarting": None,
            "lightning.pytorch.loops.loop:_Loop._loaded_from_state_dict": None,
            "lightning.pytorch.loops.loop:_Loop._resuming_from_checkpoint": None,
            f"{_EPOCH}._restart_stage": None,
            f"{_EVAL}._has_run": None,
            f"{_EPOCH}._should_check_val_epoch": None,
            f"{_EPOCH}._skip_next_val": None,
            f"{_EPOCH}._warning_cache": None,
            "lightning.pytorch.utilities.combined_loader:CombinedLoader._iterator": None,
            "lightning.pytorch.utilities.combined_loader:CombinedLoader._spec": None,
            "lightning.pytorch.utilities.combined_loader:_ModeIterator._idx": None,
            "lightning.pytorch.utilities.combined_loader:_MaxSizeCycle._consumed": None,
            "lightning.pytorch.utilities._pytree:tree_unflatten": None,
            f"{_AUTO}._skip_backward": None,
            "lightning.pytorch.strategies.strategy:Strategy._lightning_optimizers": None,
            "lightning.pytorch.trainer.trainer:Trainer._data_connector": None,
            "lightning.pytorch.trainer.connectors.data_connector:_DataConnector._datahook_selector": None,
            "lightning.pytorch.trainer.trainer:Trainer._signal_connector": None,
            "lightning.pytorch.core.module:LightningModule._current_fx_name": None,
            # Lightning's advance's transfer calls, made as it makes them where a transfer hook is the user's
            "lightning.pytorch.core.module:LightningModule._on_before_batch_transfer": (
                "(self, batch: Any, dataloader_idx: int = 0) -> Any"
            ),
            "lightning.pytorch.trainer.call:_call_strategy_hook": (
                "(trainer: 'pl.Trainer', hook_name: str, *args: Any, **kwargs: Any) -> Any"
            ),
            "torch._C:_set_grad_enabled": None,
        },
        users=("lit_gpu.fastpath.*",),
        pins=(
            "unit/test_upstream_pins.py::test_automatic_optimization__run__build_kwargs__optim_progress",
            "unit/test_upstream_pins.py::test_enable_grad_is_set_grad_enabled_true_and_back",
            "unit/test_upstream_pins.py::test_strategy_training_step_with_plain_precision_is_the_modules_training_step",
            "unit/test_upstream_pins.py::test_strategy__lightning_optimizers__on_before_step_do_nothing",
            "unit/test_upstream_pins.py::test_training_epoch_loop__advance__as_lean_training_batch_mirrors_it",
            "unit/test_upstream_pins.py::test_callback_and_model_hooks_batch_hooks_are_empty",
            "unit/test_upstream_pins.py::test_abstract_closure__consume_result_raises_when_not_run",
            "unit/test_upstream_pins.py::test_call_callback_hooks__call_lightning_module_hook__skip_a_non_callable_hook",
        ),
    ),
    "capture": Feature(
        "whole-step capture (speed.cuda_graph)",
        "steps run as usual",
        mirrored=STEP_MIRRORED,
        private={"torch.optim.optimizer:Optimizer._warned_capturable_if_run_uncaptured": None},
        keys=("_last_lr",),  # an LR scheduler's state_dict(), moved to the captured step's tensor
        # CUDA graphs and the optimizers' `capturable`, as verified: 2.14 by the CPU tiers, 2.11.0+cu130 on an
        # H200 (pytest -m gpu's replayed-steps-equal-ordinary-steps test, issue 59)
        torch=(("2.11.0", "2.11.0"), ("2.14.0", "2.14.1")),
        users=("lit_gpu.fastpath.graph", "lit_gpu.fastpath.step"),
        pins=(
            "unit/callbacks/test_step_graph.py::test_captured_steps_train_exactly_as_ordinary_steps",
            "unit/callbacks/test_step_graph.py::test_a_checkpoint_written_during_the_fit_holds_floats_and_the_optimizers_own_settings",
        ),
    ),
    "fresh last": Feature(
        "FreshLastCheckpoint's fresh last.ckpt",
        "Lightning's ModelCheckpoint writes last.ckpt as it does",
        mirrored=(f"{_CKPT}.on_train_batch_end",),
        private={
            f"{_CKPT}._save_topk_checkpoint": _CANDIDATES,
            f"{_CKPT}._save_last_checkpoint": _CANDIDATES,
            f"{_CKPT}._should_skip_saving_checkpoint": f"(self, trainer: '{_TRAINER}') -> bool",
            f"{_CKPT}._monitor_candidates": f"(self, trainer: '{_TRAINER}') -> dict[str, torch.Tensor]",
            f"{_CKPT}._every_n_train_steps": None,
            f"{_CKPT}._train_time_interval": None,
            f"{_CKPT}._last_time_checked": None,
            f"{_CKPT}._last_global_step_saved": None,
        },
        users=("lit_gpu.callbacks.fresh_last",),
        pins=(
            "unit/test_upstream_pins.py::test_model_checkpoint__save_topk_checkpoint__save_last_checkpoint__last_global_step_saved",
            "unit/test_upstream_pins.py::test_model_checkpoint_trigger_state_used_by_fresh_last",
            "unit/test_upstream_pins.py::test_model_checkpoint__on_train_batch_end_without_a_step_or_time_trigger_changes_nothing",
            "unit/test_upstream_pins.py::test_trainer_step_and_epoch_counters_read_directly",
        ),
    ),
    "removal guard": Feature(
        "FreshLastCheckpoint's removal guard",
        "",
        private={f"{_CKPT}._remove_checkpoint": f"(self, trainer: '{_TRAINER}', filepath: str) -> None"},
        promise="nothing outside the checkpoint folder deleted",
        users=("lit_gpu.callbacks.fresh_last",),
        pins=("unit/checkpoints/test_inside.py::test_a_checkpoint_link_named_with_tilde_is_not_removed",),
    ),
    "whole steps": Feature(
        "checkpoints only at optimizer step boundaries under gradient accumulation (FreshLastCheckpoint, "
        "CheckpointOnInterrupt)",
        "",
        private={f"{_EPOCH}._should_accumulate": "(self) -> bool"},
        promise="no last.ckpt between the micro-batches of one optimizer step",
        users=("lit_gpu.upstream",),
        pins=(
            "unit/callbacks/test_whole_steps.py::test_a_validation_between_micro_batches_saves_last_at_the_next_step",
        ),
    ),
    "exact resume": Feature(
        "the resumed loader's position (RNGStateCallback)",
        "",
        private={
            "lightning.pytorch.loops.fit_loop:_FitLoop._combined_loader": None,
            "lightning.pytorch.loops.fit_loop:_FitLoop._combined_loader_states_to_load": None,
            "lightning.pytorch.loops.fit_loop:_FitLoop._load_combined_loader_states": "(self) -> None",
            "lightning.pytorch.loops.fit_loop:_FitLoop.restarted_mid_epoch": None,
            "lightning.pytorch.loops.fit_loop:_FitLoop.reset_restart_stage": "(self) -> None",
        },
        promise="an exact resume (the checkpoint's sample next)",
        users=("lit_gpu.upstream", "lit_gpu.resume.plain"),
        pins=(
            "unit/test_upstream_pins.py::test_fit_loop_loader_state_internals_used_by_exact_resume",
            "unit/test_upstream_pins.py::test_fit_loop_restart_stage_after_a_save_at_an_epochs_last_batch",
        ),
    ),
    "logging state": Feature(
        "the epoch's logged aggregates across a resume (LoggingStateCallback)",
        "they start afresh after a resume, as in Lightning",
        private={
            f"{_RESULT}:_Metadata": None,
            f"{_RESULT}:_Sync": None,
            f"{_RESULT}:_ResultMetric": None,
            f"{_RESULT}:_ResultMetric.__init__": f"(self, metadata: {_METADATA}, is_tensor: bool) -> None",
            f"{_LOGGER}._first_loop_iter": None,
            f"{_EPOCH}._results": None,
            "torchmetrics.metric:Metric._defaults": None,
            "torchmetrics.metric:Metric._update_count": None,
            "torchmetrics.metric:Metric._computed": None,
            "torchmetrics.metric:Metric._forward_cache": None,
        },
        users=("lit_gpu.resume.state",),
        pins=(
            "unit/test_upstream_pins.py::test_result_collection__result_metric__metadata__sync__first_loop_iter",
        ),
    ),
    "validation steps": Feature(
        "the per-step validation rows' steps across a resume (LoggingStateCallback)",
        "they start again at 0 after a resume, as in Lightning",
        private={f"{_EVAL}._seen_batches_per_dataloader": None},
        users=("lit_gpu.resume.state",),
        pins=("unit/test_upstream_pins.py::test_evaluation_loop__seen_batches_per_dataloader",),
    ),
    "hook name": Feature(
        "PlainHookName's plain _current_fx_name",
        "nn.Module's __setattr__ stores it",
        private={"lightning.pytorch.core.module:LightningModule._current_fx_name": None},
        users=("lit_gpu.fastpath.*",),
        pins=("unit/test_upstream_pins.py::test_lightning_module__current_fx_name",),
    ),
    "anomaly check": Feature(
        "the NaN guard's deferral to Trainer(detect_anomaly=True)",
        "the NaN guard runs whatever detect_anomaly says",
        private={"lightning.pytorch.trainer.trainer:Trainer._detect_anomaly": None},
        users=("lit_gpu.upstream",),
        pins=("unit/test_upstream_pins.py::test_trainer__detect_anomaly",),
    ),
    "allocator setting": Feature(
        "OOMRecovery's allocator setting (expandable segments)",
        "the allocator keeps its setting and OOMRecovery retries as usual",
        private={  # torch >= 2.9's setter, and the one before it (torch_hooks.set_allocator_settings)
            "torch._C:_accelerator_setAllocatorSettings": None,
            "torch.cuda.memory:_set_allocator_settings": None,
        },
        users=("lit_gpu.upstream",),
        pins=(
            "unit/test_upstream_pins.py::test_allocator_settings_at_run_time_as_oom_recovery_sets_them",
        ),
    ),
    "scheduler children": Feature(
        "the resume check of SequentialLR's and ChainedScheduler's children (torch_hooks.scheduler_children)",
        "their states are checked by kind only, not against each child's settings",
        private={
            "torch.optim.lr_scheduler:SequentialLR._schedulers": None,
            "torch.optim.lr_scheduler:ChainedScheduler._schedulers": None,
        },
        users=("lit_gpu.upstream",),
        pins=(
            "unit/test_upstream_pins.py::test_torch_chained_schedulers_keep_their_children_in__schedulers",
        ),
    ),
    "interrupt": Feature(
        "the interrupt callback's signal handling (CheckpointOnInterrupt, preemption.py)",
        "",
        private={
            "lightning.pytorch.trainer.trainer:Trainer._signal_connector": None,
            "lightning.pytorch.trainer.connectors.signal_connector:_SignalConnector._original_handlers": None,
            "torch.utils.data._utils.signal_handling:_set_SIGCHLD_handler": "() -> None",
            "torch.utils.data.dataloader:DataLoader._get_iterator": "(self) -> '_BaseDataLoaderIter'",
        },
        promise="a loadable checkpoint on a signal (the main process answers it, not a loader's worker)",
        users=("lit_gpu.upstream",),
        pins=(
            "unit/test_upstream_pins.py::test_trainer__signal_connector_received_sigterm_and_original_handlers",
            "unit/test_upstream_pins.py::test_dataloader_get_iterator__set_sigchld_handler",
        ),
    ),
    "loader replay": Feature(
        "a plain training DataLoader made replayable on a resume (resume/plain.py)",
        "",
        mirrored=("lightning.pytorch.loops.fit_loop:_FitLoop.setup_data",),
        private={
            "lightning.pytorch.loops.fit_loop:_FitLoop._combined_loader": None,
            "lightning.pytorch.loops.fit_loop:_FitLoop._load_combined_loader_states": "(self) -> None",
            "lightning.pytorch.loops.fit_loop:_FitLoop._combined_loader_states_to_load": None,
            "lightning.fabric.utilities.types:_Stateful": None,
            "torch.utils.data.dataloader:DataLoader._get_iterator": "(self) -> '_BaseDataLoaderIter'",
            "torch.utils.data.dataloader:DataLoader._iterator": None,
            "torch.utils.data.dataloader:_BaseDataLoaderIter._sampler_iter": None,
            "torch.utils.data.dataloader:_BaseDataLoaderIter._num_yielded": None,
        },
        promise="an exact resume of a plain DataLoader (the checkpoint's sample next)",
        users=("lit_gpu.resume.plain", "lit_gpu.upstream"),
        pins=("unit/test_upstream_pins.py::test_fit_loop__setup_data__load_combined_loader_states",),
    ),
    "cluster resume": Feature(
        "the run store's choice of a cluster checkpoint (cli/lightning_cli.py)",
        "",
        private={
            "lightning.pytorch.trainer.trainer:Trainer._checkpoint_connector": None,
            f"{_CONNECTORS}.checkpoint_connector:_CheckpointConnector._hpc_resume_path": None,
        },
        promise="no resume from a cluster checkpoint the owner rules passed over",
        users=("lit_gpu.cli.lightning_cli",),
        pins=("unit/test_upstream_pins.py::test_checkpoint_connector__hpc_resume_path",),
    ),
    "torch zip reader": Feature(
        "the checkpoint reader's view through torch's zip reader (checkpoints/scan.py)",
        "",
        private={"torch._C:PyTorchFileReader": None},
        promise="a checkpoint read once, within its memory bound, as torch.load reads it",
        users=("lit_gpu.checkpoints.scan",),
        pins=("unit/test_upstream_pins.py::test_torch_pytorch_file_reader",),
    ),
    "config reading": Feature(
        "the bounded config reader's jsonargparse hooks (upstream.py)",
        "",
        private={
            "jsonargparse._loaders_dumpers:get_yaml_default_loader": "()",
            "jsonargparse._optionals:_get_config_read_mode": "() -> str",
            "jsonargparse._paths:change_to_path_dir": None,
            "jsonargparse._util:load_config_path_context": None,
            "jsonargparse:Path._std_io": None,
            "jsonargparse._typehints:ActionTypeHint._typehint": None,
            "argparse:ArgumentParser._actions": None,
            "argparse:_SubParsersAction": None,
        },
        promise="a config file read once, within its size bound, as jsonargparse reads it",
        users=("lit_gpu.upstream",),
        pins=(
            "unit/test_upstream_pins.py::test_loaders_dumpers__get_yaml_default_loader",
            "unit/test_upstream_pins.py::test_core__parse_path_contexts",
            "unit/test_upstream_pins.py::test_paths__path_read_text_and_std_io",
            "unit/test_upstream_pins.py::test_jsonargparse_action__typehint",
        ),
    ),
    "sweep trial ids": Feature(
        "the sweep's trial ids (optuna's Trial._trial_id)",
        "",
        private={"optuna.trial:Trial._trial_id": None},
        promise="each trial's run matched to its optuna storage row",
        users=("lit_gpu.upstream",),
        pins=("unit/test_upstream_pins.py::test_optuna_trial__trial_id",),
    ),
    "step log check": Feature(
        "the per-step logger check (LitModule's train/loss_step)",
        "the module logs every step and Lightning keeps what its loggers record",
        mirrored=(f"{_LOGGER}.should_update_logs",),
        private={
            f"{_EPOCH}._batches_that_stepped": None,
            "lightning.pytorch.trainer.trainer:Trainer._logger_connector": None,
        },
        users=("lit_gpu.upstream", "lit_gpu.resume.state"),
        pins=("unit/test_upstream_pins.py::test_trainer__logger_connector_should_update_logs",),
    ),
    "dp": Feature(
        "strategy dp",
        "",
        private={
            "lightning.pytorch.strategies.parallel:ParallelStrategy._configure_launcher": "(self) -> None",
            "lightning.pytorch.strategies.strategy:Strategy._setup_model": (
                "(self, model: torch.nn.modules.module.Module) -> torch.nn.modules.module.Module"
            ),
            "lightning.pytorch.strategies.strategy:Strategy._launcher": None,
        },
        promise="strategy: dp (Lightning 2 has none of its own)",
        users=("lit_gpu.strategies.dp",),
        pins=(
            "unit/test_upstream_pins.py::test_strategy__configure_launcher__setup_model",
            "unit/test_upstream_pins.py::test_strategy_registry__register",
            "unit/test_upstream_pins.py::test_subprocess_script_launcher__call_children_scripts__subprocess_popen",
        ),
    ),
    "one-subcommand parse": Feature(
        "the CLI's one-subcommand parser",
        "every subcommand's parser is built, as in Lightning",
        mirrored=("lightning.pytorch.cli:LightningCLI._add_subcommands",),
        private={
            "lightning.pytorch.cli:LightningCLI._add_subcommands": (
                "(self, parser: lightning.pytorch.cli.LightningArgumentParser, **kwargs: Any) -> None"
            )
        },
        users=("lit_gpu.cli.lightning_cli",),
        pins=("unit/test_upstream_pins.py::test_lightning_cli__add_subcommands__subcommand_parsers",),
    ),
    "config decides": Feature(
        "the CLI's --ckpt_path resolution",
        "",
        private={
            "lightning.pytorch.cli:LightningCLI._parse_ckpt_path": "(self) -> None",
            "lightning.pytorch.core.mixins.hparams_mixin:_given_hyperparameters": None,
            "lightning.pytorch.utilities.model_helpers:_restricted_classmethod": None,
            "lightning.pytorch.core.module:LightningModule._trainer": None,
        },
        keys=("_instantiator", "_class_path", "_batches_that_stepped"),  # hyper-parameters', a checkpoint's
        promise="the config, not a checkpoint's hyper-parameters, choosing the model",
        users=("lit_gpu.upstream", "lit_gpu.cli.lightning_cli"),
        pins=(
            "unit/test_upstream_pins.py::test_hparams_mixin__given_hyperparameters",
            "unit/test_upstream_pins.py::test_lightning_cli__parse_ckpt_path",
            "unit/test_upstream_pins.py::test_model_helpers__restricted_classmethod",
            "unit/test_upstream_pins.py::test_saving__load_from_checkpoint",
            "unit/test_upstream_pins.py::test_checkpoint_loop_state_read_by_resume_log_step",
        ),
    ),
    "own CLI path": Feature(
        "lit_gpu's steps on the CLI's own path",
        "",
        private={
            "lightning.pytorch.cli:LightningCLI._add_arguments": (
                "(self, parser: lightning.pytorch.cli.LightningArgumentParser) -> None"
            ),
            "lightning.pytorch.cli:LightningCLI._set_seed": "(self) -> None",
            "lightning.pytorch.cli:LightningCLI._instantiate_trainer": (
                "(self, config: dict[str, typing.Any], callbacks: list[lightning.pytorch.callbacks.callback."
                "Callback]) -> lightning.pytorch.trainer.trainer.Trainer"
            ),
            "lightning.pytorch.cli:LightningCLI._prepare_subcommand_kwargs": (
                "(self, subcommand: str) -> dict[str, typing.Any]"
            ),
        },
        promise="lit_gpu's arguments, devices and run folder whatever hooks a LitGpuCLI subclass overrides",
        users=("lit_gpu.cli.lightning_cli",),
        pins=(
            "integration/test_lightning_cli_conformance.py::test_a_subclass_overriding_hooks_without_super_keeps_lit_gpu_and_lightning",
        ),
    ),
}  # fmt: skip


#: private attributes the fast path reads on a fit's objects, a path from the trainer each (checked per fit)
FIT_PRIVATE_NAMES = (
    "fit_loop._combined_loader",
    "fit_loop.epoch_loop._results",
    "fit_loop.epoch_loop._batches_that_stepped",
    "fit_loop.epoch_loop.automatic_optimization._skip_backward",
    "fit_loop.epoch_loop.automatic_optimization.optim_progress",
    "strategy._lightning_optimizers",
    "_logger_connector",
    "_signal_connector",
    "_data_connector._datahook_selector",
    "_detect_anomaly",
    "_val_check_time_interval",  # set by a function (trainer/setup.py), not in Trainer's source
)


# ==== the gate: the check at run time =======================================================================
# Each feature declares what it depends on: the Lightning functions whose behaviour it reproduces
# (``mirrored``, a digest each in DIGESTS, so that a mismatch names the function that changed), the private
# names it reads or overrides (``private``: a function's signature, an attribute's presence), the torch
# releases it was verified on (``torch``), and for every feature a Lightning no newer than VERIFIED_UP_TO.
#: the newest Lightning release lit_gpu was verified on (Lightning's own tests: .ci/lightning_tests.py)
VERIFIED_UP_TO = "2.6.6"

ASIDE = "{feature} stands aside, {instead}: {reason}"
CANNOT_STAND_ASIDE = (
    "{feature} runs on an unverified Lightning ({reason}); it cannot stand aside: it is the only way to "
    "keep {promise} (its test is the judge)"
)


def resolve(where: str) -> Any:
    """The object ``"module:Qual.name"`` names (a property gives its getter); AttributeError/ImportError."""
    module_name, qualname = where.split(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
        if isinstance(obj, property):
            obj = obj.fget
        elif isinstance(obj, classmethod | staticmethod):
            obj = obj.__func__
    return obj


def digest(fn: Any) -> str:
    """SHA-256 (16 hex digits) of a function's source; "" if it cannot be read."""
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
    except (OSError, TypeError):
        return ""


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _mirrored_problem(where: str) -> str | None:
    short = where.split(":")[1]
    try:
        fn = resolve(where)
    except (ImportError, AttributeError):
        return f"it has no {short}"
    if digest(fn) not in {DIGESTS.get(where), *EARLIER.get(where, {}).values()}:
        return f"its {short} differs from the code lit_gpu mirrors"
    return None


@functools.cache
def _class_source(owner: type) -> str:
    """A class's source, read once per process (its file does not change under a run; a class replaced is
    another key). Tokenizing a large class (Trainer's) for each of its attributes took most of the gate's
    time."""
    return inspect.getsource(owner)


def _private_problem(where: str, signature: str | None) -> str | None:
    short = where.split(":")[1]
    try:
        obj = resolve(where)
    except (ImportError, AttributeError):
        # an instance attribute (not a module's name): set as ``self.name`` in its class's source
        if signature is None and "." in where.split(":")[1]:
            owner_where, _, name = where.rpartition(".")
            try:
                source = _class_source(resolve(owner_where))
            except (ImportError, AttributeError, OSError, TypeError):
                return f"it has no {owner_where.split(':')[1]}"
            if f"self.{name} =" in source or f"self.{name}:" in source:
                return None
        return f"it has no {short}"
    if signature is not None:
        try:
            found = str(inspect.signature(obj))
        except (TypeError, ValueError):
            found = "?"
        if found != signature:
            return f"its {short} takes {found}, not {signature}"
    return None


@functools.cache
def problem(name: str) -> str | None:
    """Why the installed Lightning/torch differ from what feature ``name`` was verified on, or None.

    Computed once per process (``problem.cache_clear()`` in tests).
    """
    import lightning

    feature = FEATURES[name]
    version = lightning.__version__
    if _version_tuple(version) > _version_tuple(VERIFIED_UP_TO):
        return f"Lightning {version} is newer than {VERIFIED_UP_TO}, the newest it was verified on"
    if feature.torch is not None:
        import torch

        installed = _version_tuple(torch.__version__)
        if not any(_version_tuple(a) <= installed <= _version_tuple(b) for a, b in feature.torch):
            ranges = ", ".join(a if a == b else f"{a} to {b}" for a, b in feature.torch)
            return f"torch {torch.__version__} is outside {ranges}, the releases it was verified on"
    for where in feature.mirrored:
        found = _mirrored_problem(where)
        if found is not None:
            return f"Lightning {version}: {found}"
    for where, signature in feature.private.items():
        found = _private_problem(where, signature)
        if found is not None:
            return f"Lightning {version}: {found}"
    return None


_told: set[tuple[str, str]] = set()


def tell_once(name: str, reason: str) -> None:
    if (name, reason) in _told:
        return
    _told.add((name, reason))
    feature = FEATURES[name]
    if feature.promise is None:
        messages.tell(ASIDE.format(feature=feature.name, instead=feature.instead, reason=reason))
    else:
        messages.tell(CANNOT_STAND_ASIDE.format(feature=feature.name, reason=reason, promise=feature.promise))


def stands_aside(name: str) -> bool:
    """Whether feature ``name`` stands aside in this process (stock Lightning runs); told once.

    A feature with a ``promise`` never stands aside: on a mismatch its line says so and it runs.
    """
    reason = problem(name)
    if reason is None:
        return False
    tell_once(name, reason)
    return FEATURES[name].promise is None


def reset() -> None:
    """Forget what was checked and told (tests that change an upstream function)."""
    problem.cache_clear()
    _told.clear()


def take_digests() -> dict[str, str]:
    """The digest of every mirrored function, as installed (to re-take :data:`DIGESTS`)."""
    names = sorted({where for feature in FEATURES.values() for where in feature.mirrored})
    return {where: digest(resolve(where)) for where in names}


# ==== accessors several rooms share =========================================================================


def __getattr__(name: str) -> Any:
    """``restricted_classmethod``: Lightning's class-only classmethod (``model.load_from_checkpoint(...)`` on
    an instance raises), which lit_gpu's LitModule.load_from_checkpoint keeps; loaded on first use, so that
    importing this module imports no Lightning (pinned by test_model_helpers__restricted_classmethod)."""
    if name == "restricted_classmethod":
        from lightning.pytorch.utilities.model_helpers import _restricted_classmethod

        return _restricted_classmethod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def given_hyperparameters() -> Any:
    """The init args LightningCLI is instantiating the current module with (a mapping), else None.

    Pinned by test_hparams_mixin__given_hyperparameters: no public API gives the CLI config there.
    """
    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters

    return _given_hyperparameters.get()


def loggers_record_this_step(trainer: Any) -> bool:
    """Whether the loggers record the current training step (``log_every_n_steps``); True without a trainer.

    Pinned by test_trainer__logger_connector_should_update_logs: no public API says it.
    """
    from lightning.pytorch.trainer.states import RunningStage

    connector = getattr(trainer, "_logger_connector", None)
    if connector is None or stands_aside("step log check"):  # aside: Lightning keeps what its loggers record
        return True
    if trainer.state.stage is RunningStage.TRAINING:  # the fit loop's case, without its enum comparisons
        every = trainer.log_every_n_steps  # (the property's source is pinned: MIRRORED_SOURCE)
        if every == 0:
            return False
        return (trainer.fit_loop.epoch_loop._batches_that_stepped + 1) % every == 0 or trainer.should_stop
    return bool(connector.should_update_logs)


def detect_anomaly(trainer: Any) -> bool:
    """Whether the trainer runs autograd's anomaly detection (``Trainer(detect_anomaly=True)``).

    Pinned by test_trainer__detect_anomaly: the Trainer keeps the flag in a private attribute only.
    """
    if stands_aside("anomaly check"):  # aside: the NaN guard runs whatever the flag says
        return False
    return bool(getattr(trainer, "_detect_anomaly", False))


# ==== Lightning's private loop, trainer and module state (callbacks, modules, resume, run) ==================
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


# ==== torch's private hooks =================================================================================
# the DataLoader's worker start and SIGCHLD handler, the allocator setting, the weights-only unpickler's
# rebuild functions, a chained scheduler's children


def install_dataloader_sigchld_handler() -> None:
    """Install torch's DataLoader SIGCHLD handler now (what the first loader with workers does; once per
    process): ``torch.utils.data._utils.signal_handling._set_SIGCHLD_handler``."""
    from torch.utils.data._utils import signal_handling

    signal_handling._set_SIGCHLD_handler()


def worker_start_hook(loader: Any) -> Callable[[Any], Any] | None:
    """The class's ``DataLoader._get_iterator`` (which starts the workers), or None if it has none."""
    found = getattr(type(loader), "_get_iterator", None)
    return found if callable(found) else None


def has_own_worker_start(loader: Any) -> bool:
    """Whether ``loader`` has its own ``_get_iterator`` (set on the instance)."""
    return "_get_iterator" in vars(loader)


def set_worker_start(loader: Any, start: Callable[[], Any]) -> None:
    """Make ``loader`` start its workers through ``start`` (an instance ``_get_iterator``)."""
    loader._get_iterator = start


def set_allocator_settings(settings: str) -> None:
    """PyTorch's runtime allocator setting: torch >= 2.9's ``torch._C._accelerator_setAllocatorSettings``,
    else ``torch.cuda.memory._set_allocator_settings``."""
    import torch

    if stands_aside("allocator setting"):  # aside: the allocator keeps its setting
        return
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        setter = torch.cuda.memory._set_allocator_settings
    setter(settings)


def unpickler_rebuild_names() -> set[str]:
    """The ``torch._utils._rebuild_*`` functions a tensor's pickle names (for the weights-only check)."""
    import torch

    return {f"torch._utils.{n}" for n in vars(torch._utils) if n.startswith("_rebuild_")}


def has_scheduler_children(scheduler: Any) -> bool:
    """Whether ``scheduler`` is a scheduler of schedulers (``SequentialLR``, ``ChainedScheduler``: torch keeps
    them in ``_schedulers``), whichever way the gate reads their states."""
    return getattr(scheduler, "_schedulers", None) is not None


def scheduler_children(saved: Any, scheduler: Any) -> list[tuple[Any, Any]]:
    """``(saved state, scheduler)`` of each child of a ``SequentialLR`` or ``ChainedScheduler`` (torch keeps
    them in ``_schedulers``, and their states under that key of its ``state_dict``); ``[]`` for others."""
    if stands_aside("scheduler children"):  # aside: the children's states are checked by kind only
        return []
    children = getattr(scheduler, "_schedulers", None)
    states = saved.get("_schedulers") if isinstance(saved, dict) else None
    if not (isinstance(children, list) and isinstance(states, list)):
        return []
    return list(zip(states, children, strict=False))


# ==== the tools around Lightning ============================================================================
# jsonargparse's (and argparse's) parser actions and YAML loader, optuna's trial ids


def parser_actions(parser: Any) -> list[Any]:
    """An argparse (or jsonargparse) parser's actions (``parser._actions``), in order."""
    return list(getattr(parser, "_actions", []))


def subcommands_action(parser: Any) -> Any:
    """The parser's subcommands action (an ``argparse._SubParsersAction``)."""
    import argparse

    return next(a for a in parser_actions(parser) if isinstance(a, argparse._SubParsersAction))


def widen_type(parser: Any, dest: str, widen: Callable[[Any], Any]) -> None:
    """Replace the type hint of the argument ``dest`` by ``widen(hint)``: jsonargparse offers no public way
    to widen the type of an argument added from a signature (``action._typehint``)."""
    for action in parser_actions(parser):
        typehint = getattr(action, "_typehint", None)
        if getattr(action, "dest", None) == dest and typehint is not None:
            action._typehint = widen(typehint)


def jsonargparse_yaml_loader() -> Any:
    """jsonargparse's YAML loader class (its resolvers: ``1e-3`` is a float, no timestamps), so that lit_gpu's
    bounded reader reads a config exactly as jsonargparse's own loader does (``_loaders_dumpers``; pinned)."""
    from jsonargparse._loaders_dumpers import get_yaml_default_loader

    return get_yaml_default_loader()


@contextmanager
def jsonargparse_config_contexts(path: Any) -> Iterator[None]:
    """The two contexts jsonargparse's ``parse_path`` sets around parsing the config file ``path`` (paths in
    it relative to its folder, a file including itself an error), for a text lit_gpu read itself
    (``_util.load_config_path_context``, ``_paths.change_to_path_dir``; pinned)."""
    from jsonargparse._optionals import _get_config_read_mode
    from jsonargparse._paths import Path, change_to_path_dir
    from jsonargparse._util import load_config_path_context

    fpath = Path(path, mode=_get_config_read_mode())
    with load_config_path_context(fpath), change_to_path_dir(fpath):
        yield


@contextmanager
def jsonargparse_bounded_reads(read: Callable[[str], str]) -> Iterator[None]:
    """While it lasts, jsonargparse reads a local file it is pointed at from inside a config (a sub-config
    such as ``data: other.yaml`` or ``init_args: x.yaml``, a list from a file) as ``read(path)``, not as
    ``open(path).read()`` of any size (``Path.read_text``, swapped for the call; ``Path._std_io``; pinned).
    Standard input, URLs and fsspec paths stay jsonargparse's own."""
    from jsonargparse import Path

    original = Path.read_text

    def read_text(self: Path) -> str:
        if self._std_io or self.is_url or self.is_fsspec:
            return original(self)
        return read(self.absolute)

    Path.read_text = read_text  # type: ignore[method-assign]
    try:
        yield
    finally:
        Path.read_text = original  # type: ignore[method-assign]


def trial_id(trial: Any) -> int:
    """An optuna trial's storage id (``Trial._trial_id``, ``FrozenTrial._trial_id``; not ``number``)."""
    return trial._trial_id


# (``restricted_classmethod`` too, through the module's ``__getattr__``)
__all__ = [
    "BATCH_MIRRORED",
    "DIGESTS",
    "EARLIER",
    "FEATURES",
    "FIT_PRIVATE_NAMES",
    "Feature",
    "STEP_MIRRORED",
    "VERIFIED_UP_TO",
    "attached_trainer",
    "batches_that_stepped",
    "cancel_sigterm_stop",
    "detect_anomaly",
    "digest",
    "given_hyperparameters",
    "has_own_worker_start",
    "has_scheduler_children",
    "install_dataloader_sigchld_handler",
    "jsonargparse_bounded_reads",
    "jsonargparse_config_contexts",
    "jsonargparse_yaml_loader",
    "load_pending_loader_states",
    "loggers_record_this_step",
    "open_accumulation",
    "parser_actions",
    "pop_cli_instantiation",
    "problem",
    "recorded_class_path",
    "replace_restored_handler",
    "request_sigterm_stop",
    "reset",
    "resolve",
    "saved_loop_counters",
    "scheduler_children",
    "set_allocator_settings",
    "set_worker_start",
    "stands_aside",
    "subcommands_action",
    "take_digests",
    "tell_once",
    "train_combined_loader",
    "trial_id",
    "unpickler_rebuild_names",
    "widen_type",
    "worker_start_hook",
]
