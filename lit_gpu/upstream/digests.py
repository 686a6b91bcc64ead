# ruff: noqa: E501
"""SHA-256 (16 hex digits) of the source of each Lightning function lit_gpu mirrors, by "module:Qual.name".

Taken on Lightning 2.6.6 with :func:`lit_gpu.upstream.features.take_digests` (whoever re-checks the copies
against a new release re-takes them); :mod:`lit_gpu.upstream.gate` compares them one by one. A release
inside pyproject.toml's range whose copy of a function differs from 2.6.6's in code lit_gpu does not mirror
has its digest in :data:`EARLIER`, with the release and the difference (re-checked by hand, one by one).
"""

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
