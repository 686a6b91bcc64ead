"""LitGpuCLI: LightningCLI with lit_gpu's defaults, its parser, and the extra ``lit-gpu`` arguments.

Thin by design: it builds objects from configs and runs them; no training logic lives here.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI, SaveConfigCallback
from typing_extensions import override

from lit_gpu import messages
from lit_gpu import strategies as _strategies  # noqa: F401  (registers strategy: dp)
from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.callbacks.guarantees import GUARANTEES, install_guarantees
from lit_gpu.callbacks.nan_guard import NaNGuard
from lit_gpu.callbacks.prediction_writer import CSVPredictionWriter
from lit_gpu.callbacks.progress import DEFAULT_INTERVAL, use_progress_log
from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.checkpoints.io import install_atomic_checkpoint_io
from lit_gpu.cli import config_files, quiet, recipes, run_folders
from lit_gpu.cli.errors import (
    check_has_data,
    check_has_step,
    check_seed,
    concise_parse_error,
    explain_build_failure,
    missing_requirement,
    runs_lightnings,
    yaml_error,
)
from lit_gpu.devices import allow_auto_precision, as_argv, explain_trainer_error, resolve_trainer_config
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import explain
from lit_gpu.fastpath.batch import LeanTrainingBatch
from lit_gpu.fastpath.hooks import skip_idle_profiler
from lit_gpu.fastpath.step import LeanOptimizerStep, SkipIdleHooks
from lit_gpu.oom.recovery import OOMRecovery
from lit_gpu.preemption import signal_stop_code
from lit_gpu.run import loggers as run_loggers
from lit_gpu.run.folder import RunConfigSaver, RunFolder
from lit_gpu.run.layout import config_value, next_cluster_checkpoint
from lit_gpu.run.store import Resolution, built_classes, clean_run_folders, hand_over, resolve_ckpt_path
from lit_gpu.textfiles import BadFileError, read_yaml
from lit_gpu.upstream import stands_aside

# ---- texts (this module's alone) ------------------------------------------------------------------------
PREDICT_OUT_IS_DIRECTORY = "--predict_out {path} is a directory; give a file name, e.g. {example}"
CONFIG_NOT_A_MAPPING = (
    "{path} is not a config: a config file is a YAML mapping of settings (e.g. trainer:, model:, data:), "
    "this one holds {content}; fix or remove it"
)
WEIGHTS_ONLY_FROM_A_FILE = (
    "weights_only: false comes from a config file, and a file cannot switch the weights-only checkpoint load "
    "off (a pickled checkpoint runs code when loaded); to trust this checkpoint pass --weights_only false on "
    "the command line, or remove weights_only from the config"
)
TUNE_NEEDS_BATCH_SIZE = "--tune_batch_size needs a data module with a batch_size argument"
BATCH_SIZE_FOUND = "batch-size finder chose data.batch_size={size}; set it in your config to skip tuning"
NOT_A_TRAINER = (
    "trainer_class {factory} returned {kind}, not a lightning.pytorch.Trainer: LightningCLI runs a Trainer's "
    "{subcommand}(), and lit_gpu's guarantees go on its callbacks; return a Trainer (or a subclass) from it"
)

# ---- LightningCLI's protected steps behind the gate (for LitGpuCLI) ------------------------------------
# * ``_add_subcommands``: Lightning builds a parser for every subcommand (fit, validate, test, predict)
#   before it knows which one runs; where the command line starts with one (:attr:`CLIHooks.only_subcommand`)
#   only that one is built. Feature ``one-subcommand parse``: on another Lightning, every parser is built.
# * ``_parse_ckpt_path``: Lightning re-parses a checkpoint's ``hyper_parameters`` (class included) over
#   ``--config``; lit_gpu's config decides instead (the checkpoint was read weights-only and its class
#   compared before). Feature ``config decides``: it cannot stand aside; on another Lightning one line says
#   so, and the override stays.
# * lit_gpu's own path (feature ``own CLI path``): every public ``LightningCLI`` hook
#   (``add_arguments_to_parser``, ``before_instantiate_classes``, ``instantiate_trainer``, ``before_fit``...)
#   is the user's to override without ``super()``. lit_gpu's steps run from Lightning's protected ones
#   instead, each at the point of the public hook it accompanies: :meth:`CLIHooks._lit_gpu_arguments` just
#   before ``add_arguments_to_parser`` (so that a subclass can change lit_gpu's defaults there),
#   :meth:`~CLIHooks._lit_gpu_parsed` after the parse, :meth:`~CLIHooks._lit_gpu_before_instantiate` after the
#   seed, :meth:`~CLIHooks._lit_gpu_trainer_config` / :meth:`~CLIHooks._lit_gpu_trainer_built` around the
#   ``trainer_class(**config)`` call and :meth:`~CLIHooks._lit_gpu_before_run` after ``before_<subcommand>``.
#   A trainer a subclass built without ``_instantiate_trainer`` (``instantiate_trainer`` overridden without
#   ``super()``) gets :meth:`~CLIHooks._lit_gpu_trainer_built` just before the subcommand runs.


class CLIHooks(LightningCLI):
    """``LightningCLI`` building one subcommand's parser, never re-parsing a checkpoint's hparams, and running
    lit_gpu's steps on its own path."""

    #: the subcommand the command line starts with (set before ``LightningCLI.__init__``), or None
    only_subcommand: str | None = None

    # ---- lit_gpu's steps (LitGpuCLI overrides them; each defaults to nothing) -------------------------
    def _lit_gpu_arguments(self, parser: LightningArgumentParser) -> None:
        """lit_gpu's arguments: after Lightning's core ones, before ``add_arguments_to_parser``."""

    def _lit_gpu_parsed(self) -> None:
        """After the command line is parsed (``self.config``), before the seed is set."""

    def _lit_gpu_before_instantiate(self) -> None:
        """After the seed is set (``self.subcommand`` known), before ``before_instantiate_classes``."""

    def _lit_gpu_trainer_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of ``trainer_class`` (``instantiate_trainer``'s, merged), before the call."""
        return config

    def _lit_gpu_trainer_built(self, trainer: Any) -> None:
        """The trainer ``trainer_class`` returned."""

    def _lit_gpu_trainer_failed(self, err: Exception) -> None:
        """``trainer_class(**config)`` raised ``err``: raise a clearer error, or return to re-raise it."""

    def _lit_gpu_before_run(self, subcommand: str) -> None:
        """After ``before_<subcommand>``, before the subcommand runs."""

    # ---- Lightning's protected steps ----------------------------------------------------------------
    @override
    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        only = self.only_subcommand
        if only is None or stands_aside("one-subcommand parse"):
            return super()._add_subcommands(parser, **kwargs)
        every = LightningCLI.subcommands()
        self.subcommands = lambda: {only: every[only]}  # type: ignore[method-assign]  # shadows the static one
        try:
            return super()._add_subcommands(parser, **kwargs)
        finally:
            del self.subcommands

    @override
    def _parse_ckpt_path(self) -> None:
        stands_aside("config decides")  # cannot stand aside: on a mismatch the line says so
        stands_aside("own CLI path")
        self._lit_gpu_parsed()

    @override
    def _add_arguments(self, parser: LightningArgumentParser) -> None:
        users = self.add_arguments_to_parser  # the subclass's hook, or LightningCLI's empty one

        def add_arguments_to_parser(parser: LightningArgumentParser) -> None:
            self._lit_gpu_arguments(parser)
            users(parser)

        self.add_arguments_to_parser = add_arguments_to_parser  # type: ignore[method-assign]  # this call only
        try:
            super()._add_arguments(parser)
        finally:
            del self.add_arguments_to_parser

    @override
    def _set_seed(self) -> None:
        super()._set_seed()
        self._lit_gpu_before_instantiate()

    @override
    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        config = self._lit_gpu_trainer_config(config)
        try:
            trainer = super()._instantiate_trainer(config, callbacks)
        except Exception as err:
            self._lit_gpu_trainer_failed(err)
            raise
        self._lit_gpu_trainer_built(trainer)
        self._lit_gpu_seen_trainer = trainer
        return trainer

    @override
    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        # Lightning calls it after before_<subcommand>, right before the subcommand runs
        if getattr(self, "_lit_gpu_seen_trainer", None) is not self.trainer:
            # a subclass built the trainer itself (instantiate_trainer or instantiate_classes overridden
            # without super()): lit_gpu's steps for a built trainer still run, its guarantees with them
            self._lit_gpu_trainer_built(self.trainer)
            self._lit_gpu_seen_trainer = self.trainer
        self._lit_gpu_before_run(subcommand)
        return super()._prepare_subcommand_kwargs(subcommand)


# ---- Lightning's own resume from a cluster checkpoint, turned off for a trainer --------------------------
# (``hpc_ckpt_N.ckpt``, SLURM)
# Under SLURM with no ``ckpt_path``, Lightning's checkpoint connector takes the newest ``hpc_ckpt_N.ckpt`` in
# ``default_root_dir`` whoever wrote it (``_hpc_resume_path``), and its numbering stops with a ``ValueError``
# on a name such as ``hpc_ckpt_.ckpt``. The run store (:func:`lit_gpu.run.store.cluster_resolution`) chooses
# by the owner rules instead; when it passed every one over, this tells the trainer's connector not to
# look again. No public API does: pinned by ``test_checkpoint_connector__hpc_resume_path``.

_NO_CLUSTER_RESUME: dict[type, type] = {}


def no_cluster_resume(trainer: Any) -> None:
    """This trainer's fit does not resume from a cluster checkpoint by itself (its own class otherwise)."""
    connector = trainer._checkpoint_connector
    base = type(connector)
    if base in _NO_CLUSTER_RESUME.values():
        return
    if base not in _NO_CLUSTER_RESUME:
        _NO_CLUSTER_RESUME[base] = type(
            f"NoClusterResume{base.__name__}", (base,), {"_hpc_resume_path": property(lambda self: None)}
        )
    connector.__class__ = _NO_CLUSTER_RESUME[base]


def _save_path_of(save_path: Callable[[str], str], folderpath: Any) -> str:
    """``save_path`` for Lightning's folder argument (module level: the trainer pickles for ddp_spawn)."""
    return save_path(str(folderpath))


def own_cluster_saves(trainer: Any, save_path: Callable[[str], str]) -> None:
    """Lightning's requeue save (SIGUSR1 under SLURM: ``hpc_save_path``) writes where ``save_path(root)``
    says, not after the highest number of any name holding ``ckpt_`` in the root (a planted name without
    digits stops that save with a ``ValueError``, and the checkpoint is lost)."""
    trainer._checkpoint_connector.hpc_save_path = functools.partial(_save_path_of, save_path)


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
            text = CONFIG_NOT_A_MAPPING.format(path=path, content=what)
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


# ---- lit_gpu's extra arguments -----------------------------------------------------------------------
# The arguments ``lit-gpu`` adds to LightningCLI's: ``--nan_guard.*``, ``--predict_out``, ``--loggers``...
#
# Added on lit_gpu's own path (:meth:`LitGpuCLI._lit_gpu_arguments`), not in ``add_arguments_to_parser``,
# which stays the user's: a subclass overriding it without ``super()`` still gets them.
def has_option(parser: LightningArgumentParser, key: str) -> bool:
    """Whether ``parser`` has the option ``key`` (``"trainer.callbacks"``): a ``trainer_class`` (a factory, a
    Trainer subclass with a narrower ``__init__``) decides which ``trainer.*`` options exist."""
    try:
        parser.get_default(key)
    except KeyError:  # jsonargparse's NSKeyError: "No action for key ..."
        return False
    return True


def add_extra_arguments(parser: LightningArgumentParser) -> None:
    """Add ``nan_guard``, ``--predict_out``, ``--tune_batch_size``, ``--oom_recovery`` and ``free_gpus``."""
    parser.add_lightning_class_args(NaNGuard, "nan_guard")
    parser.add_argument(
        "--predict_out",
        type=str | None,
        default=None,
        help="predict only: CSV file for the predictions (index,prediction,probability for classifiers); "
        "default: predictions.csv in the evaluation's folder (RUN/evaluations/predict_K/), or in the "
        "working folder without lit_gpu's loggers",
    )
    parser.add_argument(
        "--tune_batch_size",
        type=bool,
        default=False,
        help="fit only: find the largest data.batch_size that fits in memory (Lightning's Tuner) first",
    )
    parser.add_argument(
        "--oom_recovery",
        type=bool,
        default=False,
        help="on out of memory in any loop (training, sanity check, validation, test, predict), halve the "
        "micro-batch and retry the step (same effective batch, same metrics)",
    )
    parser.add_argument(
        "--progress_interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help="when the output is not a terminal (a batch job's log): seconds between progress lines "
        "(0: one line at each epoch end only)",
    )
    parser.add_argument(
        "--progress_format",
        type=Literal["text", "json"],
        default="text",
        help="progress lines when the output is not a terminal: text, or json (one JSON object a line, "
        "also on a terminal)",
    )
    parser.add_argument(
        "--free_gpus",
        type=list[dict[str, int | str]] | None,
        default=None,
        help="written by lit-gpu (ignored on input): the physical GPUs 'devices: free:N' chose, "
        "one per local rank",
    )
    add_fresh_optimizer_argument(parser)  # --fresh_optimizer


# ---- --fresh_optimizer -------------------------------------------------------------------------------
# ``--fresh_optimizer``: resume the weights and the progress, start the optimizers and schedulers fresh.
#
# For a resume whose config changed the optimizer (SGD -> Adam), its param groups or the schedule
# (``OneCycleLR`` ``total_steps`` 8 -> 16): the checkpoint's optimizer and scheduler states no longer fit
# (:mod:`lit_gpu.checkpoints.optimizer` says so in one line); with this flag they are replaced by the states
# of the ones the config built (:mod:`lit_gpu.checkpoints.optimizer`). ``docs/checkpoints.md``.
FRESH_OPTIMIZER = "fresh_optimizer"


def add_fresh_optimizer_argument(parser: Any) -> None:
    """Add ``--fresh_optimizer`` (fit only; off by default)."""
    parser.add_argument(
        f"--{FRESH_OPTIMIZER}",
        type=bool,
        default=False,
        help="fit only, with --ckpt_path: keep the checkpoint's weights and progress, start the optimizers "
        "and learning-rate schedulers fresh as the config builds them (after changing them)",
    )


def apply_fresh_optimizer(trainer: pl.Trainer, config: Any, subcommand: str | None) -> None:
    """Tell ``trainer``'s checkpoint reader that the user asked for fresh optimizers (``fit`` only)."""
    if subcommand == "fit" and config_value(config, f"fit.{FRESH_OPTIMIZER}", False):
        trainer.strategy.checkpoint_io.fresh_optimizer = True  # read by optimizer_resume


# ---- --weights_only: typed on the command line only --------------------------------------------------
# ``weights_only: false`` is the switch that turns the weights-only checkpoint load off (a pickled checkpoint
# then runs its code); it is honoured from the command line only, never from a file.
#
# LightningCLI reads ``weights_only`` like any other key, from ``--config`` files too (Lightning 2.6,
# ``Trainer.fit(weights_only=...)``), so a downloaded config holding ``weights_only: false`` and
# ``ckpt_path: model.ckpt`` ran the code pickled in that checkpoint. The house rule: a file never switches a
# safety setting; the one documented switch is ``--weights_only false`` typed on the command line
# (docs/checkpoints.md). Settings handed over from Python (``LitGpuCLI(args={...})``, a notebook) are the
# caller's own code and pass.
WEIGHTS_ONLY_FLAG = "--weights_only"
_CONFIG_FLAGS = ("--config", "-c")


def _last_position(argv: Sequence[str], flags: Sequence[str]) -> int:
    """Index of the last ``FLAG VALUE`` or ``FLAG=VALUE`` in ``argv`` for any of ``flags``; -1 if none."""
    found = -1
    for i, arg in enumerate(argv):
        if arg in flags or any(arg.startswith(flag + "=") for flag in flags):
            found = i
    return found


def _configs_after(argv: Sequence[str]) -> list[str]:
    """The paths of the ``--config``/``-c`` files in ``argv``, in order."""
    paths = []
    for i, arg in enumerate(argv):
        flag, equals, value = arg.partition("=")
        if flag in _CONFIG_FLAGS and equals:
            paths.append(value)
        elif arg in _CONFIG_FLAGS and i + 1 < len(argv):
            paths.append(argv[i + 1])
    return paths


def _sets_weights_only(path: str) -> bool:
    """Whether the config file at ``path`` holds ``weights_only`` (at its top or in a subcommand's section);
    a file that cannot be read counts as holding it (its parse fails later, with its own line)."""
    try:
        data = read_yaml(path)
    except (OSError, BadFileError):
        return True
    if not isinstance(data, dict):
        return False
    sections = [data, *(value for value in data.values() if isinstance(value, dict))]
    return any("weights_only" in section for section in sections)


def typed_on_command_line(argv: Sequence[str]) -> bool:
    """Whether the last word on ``weights_only`` is the command line's ``--weights_only``: given, and no
    ``--config`` after it that sets it again (as jsonargparse reads them: a later file sets only its keys)."""
    flag = _last_position(argv, (WEIGHTS_ONLY_FLAG,))
    return flag >= 0 and not any(_sets_weights_only(path) for path in _configs_after(argv[flag + 1 :]))


def check_weights_only(config: Any, argv: Sequence[str], *, from_command_line: bool) -> None:
    """Refuse a ``weights_only: false`` that came from a config file (one line, exit 2; nothing loaded).

    Args:
        config: The parsed config (the subcommand's section holds ``weights_only``).
        argv: The command line as parsed.
        from_command_line: Whether the CLI parsed a command line (not settings given from Python).
    """
    if not from_command_line:
        return
    subcommand = config.get("subcommand") if hasattr(config, "get") else None
    section = config.get(subcommand) if subcommand else config
    if section is None or not hasattr(section, "get") or section.get("weights_only") is not False:
        return
    if typed_on_command_line(argv):
        return
    raise LitGpuError(WEIGHTS_ONLY_FROM_A_FILE)


# ---- around the trainer ---------------------------------------------------------------------------
def configure_trainer(
    trainer: pl.Trainer, config: Any, subcommand: str | None, run_folder: RunFolder | None = None
) -> None:
    """Atomic checkpoint IO, no idle profiler or hooks, OOM recovery or naming, the predict writer.

    ``predict`` without ``--predict_out`` writes ``predictions.csv`` into its evaluation folder
    (``run_folder``), or into the working folder when lit_gpu's loggers are off.
    """
    install_atomic_checkpoint_io(trainer)
    apply_fresh_optimizer(trainer, config, subcommand)  # read by the atomic IO's resume check
    skip_idle_profiler(trainer)  # Lightning's default profiles nothing but costs ~8 calls per hook
    if subcommand == "fit":
        clean_run_folders(config[subcommand])  # temp files of saves killed in earlier runs
    oom_listed = any(isinstance(cb, OOMRecovery) for cb in trainer.callbacks)  # --trainer.callbacks+=
    if subcommand and config_value(config, f"{subcommand}.oom_recovery", False) and not oom_listed:
        trainer.callbacks.append(OOMRecovery())  # in every loop
    predict_out = config_value(config, f"{subcommand}.predict_out") if subcommand else None
    if subcommand == "predict" and predict_out and os.path.isdir(predict_out):
        example = os.path.join(predict_out, "predictions.csv")
        raise LitGpuError(PREDICT_OUT_IS_DIRECTORY.format(path=predict_out, example=example))
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
        raise LitGpuError(TUNE_NEEDS_BATCH_SIZE)
    found = Tuner(trainer).scale_batch_size(model, datamodule=datamodule, mode="power")
    messages.tell(BATCH_SIZE_FOUND.format(size=found))


#: switches that act once, on the run they start: the printed resume command leaves them out
ONE_TIME_SWITCHES = (f"--{FRESH_OPTIMIZER}",)


def resume_argv(argv: list[str], config: Any, subcommand: str | None) -> list[str]:
    """The arguments that continue this run (the stop line's command, ``--ckpt_path`` added there).

    ``fit`` first where the CLI ran none (``run=False``, then ``cli.trainer.fit(...)``: the notebook way);
    one-time switches left out (typed) or turned off (set by a file: ``--fresh_optimizer false``).
    ``config`` is the subcommand's parsed config.
    """
    words: list[str] = []
    typed, skip = False, False
    for arg in argv:
        if skip:
            skip = False
            continue
        flag, equals, _ = arg.partition("=")
        if flag in ONE_TIME_SWITCHES:
            typed, skip = True, not equals
            continue
        words.append(arg)
    if subcommand is None:
        words.insert(0, "fit")
    if config_value(config, FRESH_OPTIMIZER, False) and not typed:
        words += [f"--{FRESH_OPTIMIZER}", "false"]
    return words


def needed_import_path(classes: Sequence[type]) -> str | None:
    """``PYTHONPATH`` as the user set it, where a class the run built (not lit_gpu's) lies in the working
    folder and was found only through it (a ``lit-gpu init`` project's module: ``PYTHONPATH=.``); or None."""
    value = os.environ.get("PYTHONPATH")
    if not value:
        return None
    named = {os.path.realpath(entry or ".") for entry in value.split(os.pathsep)}
    here = os.path.realpath(".")
    for cls in classes:
        if cls.__module__.partition(".")[0] in ("lit_gpu", "builtins"):
            continue
        file = getattr(sys.modules.get(cls.__module__), "__file__", None)
        if not file or not os.path.realpath(file).startswith(here + os.sep):
            continue
        file = os.path.realpath(file)
        roots = {os.path.realpath(entry or ".") for entry in sys.path}
        roots = {root for root in roots if file.startswith(root + os.sep)}
        if roots and roots <= named:
            return value
    return None


def program_words() -> list[str]:
    """The words that started this process before its arguments, as Python recorded them (``python
    train.py``, ``python -m lit_gpu``); ``lit-gpu`` for the console script or where they cannot be told."""
    own = sys.argv[1:]
    if os.path.basename(sys.argv[0]) == "lit-gpu":
        return ["lit-gpu"]
    words = sys.orig_argv[: len(sys.orig_argv) - len(own)]
    return words if words and sys.orig_argv[len(words) :] == own else ["lit-gpu"]


def runs_as_the_program() -> bool:
    """Whether this process runs a program whose command line (``sys.argv``) is the CLI's: ``lit-gpu``,
    ``python -m lit_gpu``, a user's ``python train.py``; not a test or a notebook that set ``sys.argv``."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not sys.argv or not sys.argv[0]:
        return False
    return os.path.realpath(path) == os.path.realpath(sys.argv[0])


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
    ``super()``: lit_gpu's steps run on their own path (:class:`CLIHooks`).
    docs/lightning_cli.md lists where it differs from LightningCLI by design.
    """

    def __init__(  # LightningCLI's parameters in LightningCLI's order, lit_gpu's defaults
        self,
        model_class: type[pl.LightningModule] | Callable[..., pl.LightningModule] | None = None,
        datamodule_class: type[pl.LightningDataModule] | Callable[..., pl.LightningDataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = RunConfigSaver,  # keeps config.yaml
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[pl.Trainer] | Callable[..., pl.Trainer] = pl.Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = 42,
        parser_kwargs: dict[str, Any] | dict[str, dict[str, Any]] | None = None,
        parser_class: type[LightningArgumentParser] = ConciseErrorParser,  # one-line config errors
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: ArgsType = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        quiet.drop_tips()  # Lightning's cloud-service adverts, also from Python (notebooks)
        if isinstance(model_class, list | tuple | dict) and args is None:  # LitGpuCLI([...]): args came first
            model_class, args = None, model_class  # before LightningCLI's order (a list is never a class)
        as_program = args is None and runs_as_the_program()  # `lit-gpu ...`, `python train.py ...`
        # what a printed command runs: this process's program; from Python (None) the printer guesses
        self.program = program_words() if as_program else None
        # the command line as the user typed it (lit_gpu:NAME kept): the resume line in the log
        self.command_line = as_argv(sys.argv[1:] if args is None else args)
        self._args_are_a_dict = isinstance(args, dict)  # settings from Python: no file switched anything
        self.run_folder: RunFolder | None = None
        self.resolution: Resolution | None = None  # what --ckpt_path resolved to, with its header
        try:
            args = recipes.resolve_args(args)  # --config lit_gpu:NAME -> the shipped file's path
            # the command line, so that a device error can name the flag or file that asked for a GPU
            self.argv = as_argv(sys.argv[1:] if args is None else args)
            fixed = {"model_class": model_class, "datamodule_class": datamodule_class}
            fixed |= {"subclass_mode_model": subclass_mode_model, "subclass_mode_data": subclass_mode_data}
            args = run_loggers.with_saved_config(args, fixed)  # --ckpt_path FILE alone: its config.yaml first
            # `fit ...`: only fit's parser is built (the other three cost ~0.12 s together: cli_construct.py)
            named = self.argv[0] if self.argv else None
            self.only_subcommand = named if named in LightningCLI.subcommands() else None
            super().__init__(
                model_class=model_class,
                datamodule_class=datamodule_class,
                save_config_callback=save_config_callback,
                save_config_kwargs=save_config_kwargs,
                trainer_class=trainer_class,
                trainer_defaults=trainer_defaults,
                seed_everything_default=seed_everything_default,
                parser_kwargs=parser_kwargs,
                parser_class=parser_class,
                subclass_mode_model=subclass_mode_model,
                subclass_mode_data=subclass_mode_data,
                args=args,
                run=run,
                auto_configure_optimizers=auto_configure_optimizers,
                load_from_checkpoint_support=load_from_checkpoint_support,
            )
        except BaseException as err:
            if self.run_folder is not None:  # a failed start leaves no empty version_N behind
                self.run_folder.remove_if_unused()  # and lets go of the run's lock
            code = signal_stop_code(getattr(self, "trainer", None), err)
            if code is not None:  # stopped by SIGINT/SIGTERM, last.ckpt saved: exit 130 / 143
                raise SystemExit(code) from err
            message = explain(err) if as_program and isinstance(err, Exception) else None
            if message is None:  # a lit_gpu bug keeps its traceback, and Python callers get the exception
                raise
            messages.tell_error(message)  # a user's mistake: one line, exit 2, from any script
            raise SystemExit(2) from err
        if self.run_folder is not None and run is not False:
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
        check_weights_only(self.config, self.argv, from_command_line=not self._args_are_a_dict)
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
        if "callbacks" in config and not self._defaults_hold(pl.callbacks.ProgressBar):
            callbacks = run_folders.progress_bar_callbacks({"trainer": config})  # redrawn 4x a second
            if callbacks is not None:
                config["callbacks"] = callbacks
        return config

    def _defaults_hold(self, kind: type[pl.Callback]) -> bool:
        """Whether ``trainer_defaults``' callbacks (on every trainer, as in LightningCLI) hold a ``kind``."""
        value = (self.trainer_defaults or {}).get("callbacks") or []
        return any(isinstance(callback, kind) for callback in (value if isinstance(value, list) else [value]))

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
            raise LitGpuError(NOT_A_TRAINER.format(factory=factory, kind=kind, subcommand=run))
        if self._defaults_hold(pl.callbacks.ModelCheckpoint):  # the user's checkpoint replaces lit_gpu's
            trainer.callbacks[:] = [c for c in trainer.callbacks if not isinstance(c, FreshLastCheckpoint)]
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
        built = [type(getattr(self, name, None)) for name in ("model", "datamodule")]
        path = needed_import_path(built)  # the stop line's command sets it again
        messages.command_starts(self.program, {} if path is None else {"PYTHONPATH": path})
        use_progress_log(  # plain lines (or JSON) in place of the live bar when stdout is not a terminal
            trainer,
            interval=config_value(config, "progress_interval", DEFAULT_INTERVAL),
            format=config_value(config, "progress_format", "text"),
            command=resume_argv(self.command_line, config, self.subcommand)
            + (["--new_run", "false"] if new_run else []),
        )
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
