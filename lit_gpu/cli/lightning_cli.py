"""LitGpuCLI: LightningCLI with lit_gpu's defaults, its parser, and the extra ``lit-gpu`` arguments.

Thin by design: it builds objects from configs and runs them; no training logic lives here.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from typing_extensions import override

from lit_gpu import messages, recipes
from lit_gpu import strategies as _strategies  # noqa: F401  (registers strategy: dp)
from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.guarantees import GUARANTEES, install_guarantees
from lit_gpu.callbacks.model_summary import lean_model_summary
from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.callbacks.oom_recovery import OOMRecovery
from lit_gpu.callbacks.prediction_writer import CSVPredictionWriter
from lit_gpu.callbacks.progress import DEFAULT_INTERVAL, use_progress_log
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.checkpoints.io import install_atomic_checkpoint_io
from lit_gpu.cli import config_files, fresh_optimizer, quiet, run_folders, weights_only_switch
from lit_gpu.cli.extra_arguments import add_extra_arguments, has_option
from lit_gpu.cli.module_steps import check_has_step, runs_lightnings
from lit_gpu.cli.needs_data import check_has_data
from lit_gpu.cli.parse_errors import concise_parse_error, yaml_error
from lit_gpu.cli.sanity import check_seed
from lit_gpu.cli.too_big import explain_build_failure, missing_requirement
from lit_gpu.cli.trainer import allow_auto_precision, as_argv, explain_trainer_error, resolve_trainer_config
from lit_gpu.errors import LitGpuError
from lit_gpu.fastpath.batch import LeanTrainingBatch
from lit_gpu.fastpath.hooks import skip_idle_profiler
from lit_gpu.fastpath.step import LeanOptimizerStep, SkipIdleHooks
from lit_gpu.preemption import signal_stop_code
from lit_gpu.run import loggers as run_loggers
from lit_gpu.run.folder import RunConfigSaver, RunFolder
from lit_gpu.run.layout import config_value, next_cluster_checkpoint
from lit_gpu.run.store import Resolution, built_classes, clean_run_folders, hand_over, resolve_ckpt_path
from lit_gpu.upstream.cli import CLIHooks
from lit_gpu.upstream.cluster import no_cluster_resume, own_cluster_saves

# ---- parser ---------------------------------------------------------------------------------------
# the --config file being read, so that a YAML syntax error can name it (jsonargparse says "<unicode string>")
_config_path = config_files.reading


def _jsonargparse_debug() -> bool:
    # jsonargparse's documented switch for full tracebacks (its own reader is private)
    return os.getenv("JSONARGPARSE_DEBUG", "").lower() == "true"


class ConciseErrorParser(LightningArgumentParser):
    """Prints a bad config key or value as one ``lit-gpu: error:`` line (exit 2), not a usage wall."""

    @override
    def error(self, message: str, ex: Exception | None = None):  # type: ignore[override]
        if not self.exit_on_error or _jsonargparse_debug():
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "").replace("__main__.py", "lit-gpu")
        path = _config_path.get()
        text = None
        if path and message.startswith("Problems parsing config"):
            text = yaml_error(ex, path)
        elif path and message.startswith("Unexpected config"):
            content = message.partition(":")[2].strip()[:60]
            what = repr(content) if content else "nothing"
            text = messages.CONFIG_NOT_A_MAPPING.format(path=path, content=what)
        messages.tell_error(text or concise_parse_error(message, prog, parser))
        self.exit(2)  # argparse's error exits through exit(), which a caller may replace

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config_files.install()  # every YAML it loads goes through lit_gpu's bounded reader first
        kwargs.setdefault("parser_mode", config_files.MODE)
        kwargs.setdefault("allow_abbrev", False)  # flags are exact: --trainer.max_epoch is no max_epochs
        super().__init__(*args, **kwargs)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled in another process (``ddp_spawn`` hands the config saver's parser to its ranks):
        the parser's YAML mode is registered there too before it loads or dumps anything."""
        config_files.install()
        self.__dict__.update(state)

    @override
    def parse_args(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        with config_files.bounded_reads():  # files named inside a config: the bounded reader too
            return super().parse_args(*args, **kwargs)

    @override
    def parse_path(
        self,
        path: Any,
        ext_vars: dict | None = None,
        env: bool | None = None,
        defaults: bool = True,
        **kwargs: Any,
    ) -> Any:
        # the file is read once, by the bounded reader, and that text is what jsonargparse parses
        with config_files.config_file(path) as text:
            if text is None:  # not a local file: jsonargparse's own error (or its URL reader)
                return super().parse_path(path, ext_vars=ext_vars, env=env, defaults=defaults, **kwargs)
            with config_files.relative_to(path):
                return self.parse_string(
                    text, path=os.path.basename(path), ext_vars=ext_vars, env=env, defaults=defaults, **kwargs
                )


# ---- lit_gpu's default callbacks ----------------------------------------------------------------------
# GUARANTEES (lit_gpu/callbacks/guarantees.py) are on whatever trainer.callbacks holds (install_guarantees;
# off: LIT_GPU_GUARANTEES=false). The step-path ones are trainer.callbacks' default, so that --print_config
# shows them and YAML can remove them: `trainer: {callbacks: [...]}` replaces the list, `callbacks+:` and
# `--trainer.callbacks+=X` append to it; null (a config written before they were listed) gets them too.
STEP_PATH_CALLBACKS: tuple[type[pl.Callback], ...] = (
    SkipIdleHooks,  # Lightning skips no-op per-batch hooks of its own callbacks and lit_gpu's (speed)
    LeanOptimizerStep,  # the automatic-optimization step without Lightning's dispatch layers (speed)
    LeanTrainingBatch,  # the per-batch loop glue without Lightning's dispatch layers (speed)
)
#: every callback class lit_gpu puts on a Trainer by default (a plain Trainer with lit_gpu's callbacks)
DEFAULT_CALLBACKS: tuple[type[pl.Callback], ...] = (*GUARANTEES, *STEP_PATH_CALLBACKS)


def default_callbacks() -> list[dict[str, str]]:
    """:data:`STEP_PATH_CALLBACKS` as config entries (``class_path`` only), by their public names.

    ``lit_gpu.callbacks.X``, not the file that defines ``X``: a run's ``config.yaml`` records these, and
    files move.
    """
    return [{"class_path": f"lit_gpu.callbacks.{cls.__qualname__}"} for cls in STEP_PATH_CALLBACKS]


PREDICTIONS_NAME = "predictions.csv"


# ---- around the trainer ---------------------------------------------------------------------------
def configure_trainer(
    trainer: pl.Trainer, config: Any, subcommand: str | None, run_folder: RunFolder | None = None
) -> None:
    """Atomic checkpoint IO, no idle profiler or hooks, OOM recovery or naming, the predict writer.

    ``predict`` without ``--predict_out`` writes ``predictions.csv`` into its evaluation folder
    (``run_folder``), or into the working folder when lit_gpu's loggers are off.
    """
    install_atomic_checkpoint_io(trainer)
    fresh_optimizer.apply(trainer, config, subcommand)  # read by the atomic IO's resume check
    skip_idle_profiler(trainer)  # Lightning's default profiles nothing but costs ~8 calls per hook
    if subcommand == "fit":
        clean_run_folders(config[subcommand])  # temp files of saves killed in earlier runs
    oom_listed = any(isinstance(cb, OOMRecovery) for cb in trainer.callbacks)  # --trainer.callbacks+=
    if subcommand and config_value(config, f"{subcommand}.oom_recovery", False) and not oom_listed:
        trainer.callbacks.append(OOMRecovery())  # in every loop
    predict_out = config_value(config, f"{subcommand}.predict_out") if subcommand else None
    if subcommand == "predict" and predict_out and os.path.isdir(predict_out):
        example = os.path.join(predict_out, "predictions.csv")
        raise LitGpuError(messages.PREDICT_OUT_IS_DIRECTORY.format(path=predict_out, example=example))
    if subcommand == "predict" and predict_out:
        trainer.callbacks.append(CSVPredictionWriter(predict_out))
    elif subcommand == "predict":
        folder = run_folder

        def where() -> Path:  # the evaluation's folder exists once the run started
            return folder.path / PREDICTIONS_NAME if folder is not None else Path(PREDICTIONS_NAME)

        trainer.callbacks.append(CSVPredictionWriter(where))


def maybe_tune_batch_size(
    trainer: pl.Trainer, model: pl.LightningModule, datamodule: Any, config: Any
) -> None:
    """Run Lightning's batch-size finder on ``datamodule.batch_size`` when ``--tune_batch_size true``."""
    if not config_value(config, "fit.tune_batch_size", False):
        return
    from lightning.pytorch.tuner import Tuner

    if datamodule is None or not hasattr(datamodule, "batch_size"):
        raise LitGpuError(messages.TUNE_NEEDS_BATCH_SIZE)
    found = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, mode="power")
    messages.tell(messages.BATCH_SIZE_FOUND.format(size=found))


# what Trainer(...) raises for settings it refuses; explain_trainer_error decides which are the user's
_TRAINER_ERRORS = (MisconfigurationException, ValueError, TypeError, ImportError)


# ---- the CLI ----------------------------------------------------------------------------------------
class LitGpuCLI(CLIHooks):
    """LightningCLI with lit_gpu's defaults: seed 42, CSV + TensorBoard loggers, best/last checkpoints.

    Everything a run writes lands in ``trainer.default_root_dir/lit_gpu/version_N`` (``runs`` by
    default; :mod:`lit_gpu.run.loggers`). The ``checkpoint`` group configures the
    :class:`FreshLastCheckpoint` (``--checkpoint.monitor val/acc --checkpoint.mode max``); model and
    data are chosen in YAML with ``class_path`` (or given as ``model_class``/``datamodule_class``).

    It takes LightningCLI's arguments with their meaning (``--optimizer``, ``trainer_class``,
    ``save_config_kwargs``...), and every public LightningCLI hook is a subclass's to override without
    ``super()``: lit_gpu's steps run on their own path (:class:`~lit_gpu.upstream.cli.CLIHooks`).
    docs/lightning_cli.md lists where it differs from LightningCLI by design.
    """

    def __init__(self, args: Sequence[str] | None = None, **kwargs) -> None:
        quiet.drop_tips()  # Lightning's cloud-service adverts, also from Python (notebooks)
        kwargs.setdefault("model_class", None)  # None: --model picks any LightningModule (class_path)
        kwargs.setdefault("datamodule_class", None)
        kwargs.setdefault("seed_everything_default", 42)
        kwargs.setdefault("parser_class", ConciseErrorParser)  # one-line config errors
        kwargs.setdefault("save_config_callback", RunConfigSaver)  # a continued run keeps its config.yaml
        # the command line as the user typed it (lit_gpu:NAME kept): the resume line in the log
        self.command_line = as_argv(sys.argv[1:] if args is None else args)
        self._args_are_a_dict = isinstance(args, dict)  # settings from Python: no file switched anything
        args = recipes.resolve_args(args)  # --config lit_gpu:NAME -> the shipped file's path
        # the command line, so that a device error can name the flag or file that asked for a GPU
        self.argv = as_argv(sys.argv[1:] if args is None else args)
        args = run_loggers.with_saved_config(args, kwargs)  # --ckpt_path FILE alone: its config.yaml first
        self.run_folder: RunFolder | None = None
        self.resolution: Resolution | None = None  # what --ckpt_path resolved to, with its header
        # `fit ...`: only fit's parser is built (the other three cost ~0.12 s together: cli_construct.py)
        named = self.argv[0] if self.argv else None
        self.only_subcommand = named if named in LightningCLI.subcommands() else None
        try:
            super().__init__(args=args, **kwargs)
        except BaseException as err:
            if self.run_folder is not None:  # a failed start leaves no empty version_N behind
                self.run_folder.remove_if_unused()  # and lets go of the run's lock
            code = signal_stop_code(getattr(self, "trainer", None), err)
            if code is not None:  # stopped by SIGINT/SIGTERM, last.ckpt saved: exit 130 / 143
                raise SystemExit(code) from err
            raise
        if self.run_folder is not None and kwargs.get("run", True) is not False:
            self.run_folder.release()  # the run ended here: its folder is no abandoned start

    # ---- lit_gpu's steps, on its own path (CLIHooks): the public hooks stay the user's --------------------
    @override
    def _lit_gpu_arguments(self, parser: LightningArgumentParser) -> None:
        if has_option(parser, "trainer.precision"):
            allow_auto_precision(parser)
        parser.add_lightning_class_args(FreshLastCheckpoint, "checkpoint")
        parser.add_lightning_class_args(SpeedLevers, "speed")  # --speed.channels_last, --speed.compile, ...
        add_extra_arguments(parser)  # --nan_guard.*, --predict_out, --tune_batch_size, --oom_recovery
        run_loggers.add_arguments(parser)  # --loggers
        defaults: dict[str, Any] = {
            "checkpoint.monitor": "val/loss",
            "checkpoint.mode": "min",
            "checkpoint.save_last": True,
            "checkpoint.save_top_k": 1,
            "checkpoint.filename": "best-epoch{epoch:02d}-step{step}",
            "checkpoint.auto_insert_metric_name": False,
        }
        if has_option(parser, "trainer.callbacks"):  # a trainer_class may take none
            defaults["trainer.callbacks"] = default_callbacks()  # SkipIdleHooks, LeanOptimizerStep, ...
        for key, value in run_loggers.TRAINER_DEFAULTS.items():  # default_root_dir: runs
            if key not in self.trainer_defaults and has_option(parser, f"trainer.{key}"):
                defaults[f"trainer.{key}"] = value
        parser.set_defaults(defaults)

    @override
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        with warnings.catch_warnings():  # args from Python (main(argv), notebooks) are intended here
            warnings.filterwarnings("ignore", message=r".*LightningCLI's args parameter is intended.*")
            super().parse_arguments(parser, args)

    @override
    def _lit_gpu_parsed(self) -> None:
        weights_only_switch.check(self.config, self.argv, from_command_line=not self._args_are_a_dict)
        # last/best/FILE -> one checkpoint, read once (weights-only; never switched off by a file)
        self.resolution = resolve_ckpt_path(self.config, self)  # its model_class= too
        check_seed(self.config)  # out of numpy's range: one line, not a ValueError from seed_everything

    @override
    def _lit_gpu_before_instantiate(self) -> None:
        # trainer.devices "free:N" -> the N GPUs with most free memory; precision "auto" -> a real one
        config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
        if config.get("trainer") is None:
            return
        choice = resolve_trainer_config(config.trainer)
        config.free_gpus = None if choice is None else choice.record()  # saved in config.yaml

    @override
    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except Exception as err:  # a net too big for memory: jsonargparse wraps the allocator's error
            config = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
            groups = {"checkpoint": FreshLastCheckpoint, "speed": SpeedLevers, "nan_guard": NaNGuard}
            groups["trainer"] = pl.Trainer
            message = explain_build_failure(err, config.as_dict(), groups) or missing_requirement(err)
            if message is None:
                raise
            raise LitGpuError(message) from err

    @override
    def _lit_gpu_trainer_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """lit_gpu's loggers (one run folder) and progress bar, where the trainer class takes them."""
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        config = dict(config)
        if "callbacks" in config and config["callbacks"] is None:
            config["callbacks"] = [cls() for cls in STEP_PATH_CALLBACKS]  # a config older than the list
        parsed = self.config[self.subcommand] if self.subcommand else self.config
        if "logger" in config and config["logger"] in (None, True):
            loggers, self.run_folder = run_loggers.trainer_loggers(  # CSV + TB, one folder
                init, self.subcommand, self.resolution, parsed, built_classes(self)
            )
            if loggers is not None:
                config["logger"] = loggers
        if "callbacks" in config:
            callbacks = run_folders.progress_bar_callbacks({"trainer": config})  # redrawn 4x a second
            if callbacks is not None:
                config["callbacks"] = callbacks
        return config

    @override
    def _lit_gpu_trainer_failed(self, err: Exception) -> None:
        if isinstance(err, _TRAINER_ERRORS):  # no GPU, devices 0, max_epochs -5, strategy typo...
            message = explain_trainer_error(err, self.argv)  # names the setting that asked for it
            if message is not None:
                raise LitGpuError(message) from err

    @override
    def _lit_gpu_trainer_built(self, trainer: pl.Trainer) -> None:
        if not isinstance(trainer, pl.Trainer):  # a trainer_class factory's (LightningCLI calls its methods)
            factory = getattr(self.trainer_class, "__qualname__", repr(self.trainer_class))
            kind, run = type(trainer).__qualname__, self.subcommand or "fit"
            raise LitGpuError(messages.NOT_A_TRAINER.format(factory=factory, kind=kind, subcommand=run))
        config = self.config_init[self.subcommand] if self.subcommand else self.config_init
        install_guarantees(trainer)  # whatever trainer.callbacks holds; a user's instance of one replaces it
        configure_trainer(
            trainer, self.config, self.subcommand, self.run_folder
        )  # atomic IO, OOM, predictions
        self.resolution = hand_over(trainer, self.resolution)  # its load reads the bytes resolved, once
        if self.resolution is not None and self.resolution.no_cluster_resume:
            no_cluster_resume(trainer)  # the store passed every hpc_ckpt over: Lightning must not take one
        own_cluster_saves(trainer, next_cluster_checkpoint)  # a requeue save numbered by the store's rules
        new_run = config_value(config, "new_run", False)  # a file's new_run: true must not move the resume
        use_progress_log(  # plain lines (or JSON) in place of the live bar when stdout is not a terminal
            trainer,
            interval=config_value(config, "progress_interval", DEFAULT_INTERVAL),
            format=config_value(config, "progress_format", "text"),
            command=self.command_line + (["--new_run", "false"] if new_run else []),
        )
        lean_model_summary(trainer)  # no all-zero FLOPs column (after the bar chose the summary's kind)
        run_folders.adapt_checkpoint_monitor(trainer)  # default val/loss: last.ckpt only if never logged
        parsed = self.config[self.subcommand] if self.subcommand else self.config
        spec = run_loggers.RecordModelSpec(parsed.get("model"), built_classes(self))  # for lit-gpu export
        trainer.callbacks.append(spec)

    @override
    def _lit_gpu_before_run(self, subcommand: str) -> None:
        if not runs_lightnings(self, subcommand):  # the CLI's own fit(), a Trainer overriding fit...
            return
        if subcommand != "fit":
            check_has_step(self.model, self.config, subcommand)  # one line, not Lightning's wall
        check_has_data(self.model, self.datamodule, subcommand)  # no loader at all: one line
        if subcommand == "fit":
            maybe_tune_batch_size(self.trainer, self.model, self.datamodule, self.config)
