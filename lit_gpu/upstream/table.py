# ruff: noqa: E501
"""The one table of what lit_gpu reaches in its upstreams (Lightning, torch, torchmetrics, jsonargparse,
optuna): every private name, by the feature that reaches it, the lit_gpu modules that may reach it (its
users) and the tests that pin it; and the source digest of every Lightning function lit_gpu mirrors.

The model is Lightning's ``fabric/utilities/imports.py``: the upstream a project depends on, declared in one
place. The gate (:mod:`lit_gpu.upstream.gate`) checks it at run time; tests/unit/upstream/test_declared.py
holds it against the source (a private upstream name reached anywhere in lit_gpu is declared here, with that
module among its users) and tests/unit/test_upstream_pins.py holds each name's behaviour (``Feature.pins``).

Digests: SHA-256 (16 hex digits) of each mirrored function's source, taken on Lightning 2.6.6 with
:func:`lit_gpu.upstream.gate.take_digests` (whoever re-checks the copies against a new release re-takes
them). A release inside pyproject.toml's range whose copy of a function differs from 2.6.6's in code
lit_gpu does not mirror has its digest in :data:`EARLIER`, with the release and the difference (re-checked by hand, one by one).
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
        users=("lit_gpu.upstream.loops",),
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
        users=("lit_gpu.upstream.loops", "lit_gpu.upstream.train_loaders"),
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
        users=("lit_gpu.upstream.logging_state",),
        pins=(
            "unit/test_upstream_pins.py::test_result_collection__result_metric__metadata__sync__first_loop_iter",
        ),
    ),
    "validation steps": Feature(
        "the per-step validation rows' steps across a resume (LoggingStateCallback)",
        "they start again at 0 after a resume, as in Lightning",
        private={f"{_EVAL}._seen_batches_per_dataloader": None},
        users=("lit_gpu.upstream.logging_state",),
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
        users=("lit_gpu.upstream.torch_hooks",),
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
        users=("lit_gpu.upstream.torch_hooks",),
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
        users=("lit_gpu.upstream.loops", "lit_gpu.upstream.torch_hooks"),
        pins=(
            "unit/test_upstream_pins.py::test_trainer__signal_connector_received_sigterm_and_original_handlers",
            "unit/test_upstream_pins.py::test_dataloader_get_iterator__set_sigchld_handler",
        ),
    ),
    "loader replay": Feature(
        "a plain training DataLoader made replayable on a resume (upstream/train_loaders.py)",
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
        users=("lit_gpu.upstream.train_loaders", "lit_gpu.upstream.loops"),
        pins=("unit/test_upstream_pins.py::test_fit_loop__setup_data__load_combined_loader_states",),
    ),
    "cluster resume": Feature(
        "the run store's choice of a cluster checkpoint (upstream/cluster.py)",
        "",
        private={
            "lightning.pytorch.trainer.trainer:Trainer._checkpoint_connector": None,
            f"{_CONNECTORS}.checkpoint_connector:_CheckpointConnector._hpc_resume_path": None,
        },
        promise="no resume from a cluster checkpoint the owner rules passed over",
        users=("lit_gpu.upstream.cluster",),
        pins=("unit/test_upstream_pins.py::test_checkpoint_connector__hpc_resume_path",),
    ),
    "torch zip reader": Feature(
        "the checkpoint reader's view through torch's zip reader (upstream/torch_reader.py)",
        "",
        private={"torch._C:PyTorchFileReader": None},
        promise="a checkpoint read once, within its memory bound, as torch.load reads it",
        users=("lit_gpu.upstream.torch_reader",),
        pins=("unit/test_upstream_pins.py::test_torch_pytorch_file_reader",),
    ),
    "config reading": Feature(
        "the bounded config reader's jsonargparse hooks (upstream/tools.py)",
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
        users=("lit_gpu.upstream.tools",),
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
        users=("lit_gpu.upstream.tools",),
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
        users=("lit_gpu.upstream", "lit_gpu.upstream.logging_state"),
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
        users=("lit_gpu.upstream.strategy",),
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
        users=("lit_gpu.upstream.cli",),
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
        users=("lit_gpu.upstream", "lit_gpu.upstream.cli", "lit_gpu.upstream.loops"),
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
        users=("lit_gpu.upstream.cli",),
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


__all__ = [
    "BATCH_MIRRORED",
    "DIGESTS",
    "EARLIER",
    "FEATURES",
    "FIT_PRIVATE_NAMES",
    "STEP_MIRRORED",
    "Feature",
]
