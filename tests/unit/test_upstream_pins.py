"""Pins of the upstream private APIs lit_gpu still relies on: one test per API, named after it.

When a Lightning or jsonargparse upgrade changes one of them, the test named after it fails first and says
which lit_gpu code to revisit. Each test carries ``@pins(dist)``: a failure names the version of ``dist``
found, the range the pins held on (pyproject.toml's lower bound, checked by CI's lower-bound stage, up to
``VERIFIED_UP_TO``) and what the test pins. Public APIs replaced the others (``fsspec.utils.get_protocol``
for local paths, ``MPSAccelerator``/``XLAAccelerator.is_available`` for ``accelerator: auto``, the documented
``JSONARGPARSE_DEBUG`` variable).
"""

from __future__ import annotations

import csv
import functools
import inspect
import sys
import textwrap
import uuid
from collections.abc import Callable
from importlib import metadata

import lightning.pytorch as pl
import pytest
import tomllib
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger
from packaging.requirements import Requirement
from packaging.version import Version

from lit_gpu import upstream as gate
from lit_gpu.cli import LitGpuCLI
from lit_gpu.devices import allow_auto_precision
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import SimpleModel
from lit_gpu.strategies import DataParallelStrategy
from tests.helpers.dp import dp_data, dp_module
from tests.helpers.paths import CONFIGS, REPO_ROOT
from tests.helpers.trainers import quiet_trainer

# the newest release of each package every pin here passed on; bump it after a green run on a newer one
# (Lightning's: the fast path's gate enforces it at run time, lit_gpu.upstream.VERIFIED_UP_TO)
VERIFIED_UP_TO = {
    "lightning": gate.VERIFIED_UP_TO,
    "jsonargparse": "4.53.0",
    "optuna": "5.0.0",
    "torch": "2.14.1",
}


def _lower_bound(dist: str) -> str:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        for line in tomllib.load(f)["project"]["dependencies"]:
            req = Requirement(line)
            if req.name == dist:
                return next(s.version for s in req.specifier if s.operator == ">=")
    raise LookupError(f"{dist} is not in pyproject.toml's [project] dependencies")


def changed_message(dist: str, test: Callable, err: BaseException) -> str:
    """What a failed pin says: the upstream version found, the range the pins held on, what is pinned."""
    found, low, high = metadata.version(dist), _lower_bound(dist), VERIFIED_UP_TO[dist]
    if Version(found) < Version(low):
        what = f"{dist} {found} is older than the lower bound {low} in pyproject.toml"
    else:
        what = f"{dist} {found} changed an API lit_gpu pins (held on {dist} {low} to {high})"
    doc = (inspect.getdoc(test) or test.__name__).splitlines()[0]
    cause = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{what}: {test.__name__}: {doc} [{type(err).__name__}: {cause}]"


def pins(dist: str) -> Callable[[Callable], Callable]:
    """Mark a test as pinning ``dist``'s internals: its failure names the upstream version that changed."""

    def wrap(test: Callable) -> Callable:
        @functools.wraps(test)
        def run(*args, **kwargs):
            try:
                return test(*args, **kwargs)
            except Exception as err:  # pytest.skip/fail are BaseException: they pass through
                raise AssertionError(changed_message(dist, test, err)) from err

        return run

    return wrap


def test_a_failed_pin_names_the_upstream_version_found_and_the_range_it_held_on():
    @pins("lightning")
    def test_example():
        """lit_gpu.example reads ``Trainer._example``."""
        assert hasattr(pl.Trainer, "_example_never_there")

    with pytest.raises(AssertionError) as info:
        test_example()
    low, high = _lower_bound("lightning"), VERIFIED_UP_TO["lightning"]
    assert str(info.value).startswith(
        f"lightning {pl.__version__} changed an API lit_gpu pins (held on lightning {low} to {high}): "
        "test_example: lit_gpu.example reads ``Trainer._example``."
    )
    assert isinstance(info.value.__cause__, AssertionError)


@pins("lightning")
def test_model_checkpoint__save_topk_checkpoint__save_last_checkpoint__last_global_step_saved(tmp_path):
    """lit_gpu.callbacks.FreshLastCheckpoint extends both hooks and reads ``_last_global_step_saved``."""
    calls: list[tuple[str, int, bool]] = []

    class Recording(ModelCheckpoint):
        def _save_topk_checkpoint(self, trainer, monitor_candidates):
            super()._save_topk_checkpoint(trainer, monitor_candidates)
            calls.append(("topk", trainer.global_step, "val/loss" in monitor_candidates))
            assert self._last_global_step_saved in (trainer.global_step, 0)

        def _save_last_checkpoint(self, trainer, monitor_candidates):
            calls.append(("last", trainer.global_step, isinstance(monitor_candidates, dict)))
            super()._save_last_checkpoint(trainer, monitor_candidates)

    cb = Recording(dirpath=tmp_path, monitor="val/loss", save_last=True)
    trainer = quiet_trainer(
        tmp_path,
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=1,
        callbacks=[cb],
        enable_checkpointing=True,
    )
    trainer.fit(dp_module(), dp_data())
    assert ("topk", 3, True) in calls and ("topk", 6, True) in calls
    assert ("last", 6, True) in calls and (tmp_path / "last.ckpt").is_file()
    assert cb._last_global_step_saved == 6


@pins("lightning")
def test_trainer__logger_connector_should_update_logs(tmp_path):
    """lit_gpu.modules.LitModule logs ``train/loss_step`` only on the steps Lightning's loggers record."""
    from lit_gpu.upstream import loggers_record_this_step

    flags: dict[int, bool] = {}
    ours: dict[int, bool] = {}  # lit_gpu's shortcut of the property for the fit loop

    class Probe(BoringModel):
        def training_step(self, batch, batch_idx):
            flags[self.trainer.global_step] = self.trainer._logger_connector.should_update_logs
            ours[self.trainer.global_step] = loggers_record_this_step(self.trainer)
            out = super().training_step(batch, batch_idx)
            self.log("probe", float(self.trainer.global_step), on_step=True, on_epoch=False)
            return out

        def on_train_batch_start(self, batch, batch_idx):
            if self.trainer.global_step == 4:
                self.trainer.should_stop = True  # this step logs; Lightning runs on to min_steps

    logger = CSVLogger(tmp_path, name="pin", version=0)
    trainer = quiet_trainer(
        tmp_path, max_steps=7, min_steps=7, log_every_n_steps=3, logger=logger, limit_val_batches=0
    )
    trainer.fit(Probe())
    with open(tmp_path / "pin" / "version_0" / "metrics.csv") as f:
        logged = {round(float(row["probe"])) for row in csv.DictReader(f) if row.get("probe")}
    assert logged == {step for step, flag in flags.items() if flag}
    assert logged and len(logged) < len(flags)
    assert ours == flags


@pins("lightning")
def test_strategy__configure_launcher__setup_model(tmp_path):
    """DataParallelStrategy checks devices in ``_configure_launcher``, wraps the net in ``_setup_model``."""
    seen: dict[str, object] = {}

    class Recording(DataParallelStrategy):
        def _configure_launcher(self) -> None:
            seen["devices_at_launcher"] = list(self.parallel_devices or [])
            super()._configure_launcher()

        def _setup_model(self, model):
            seen["setup_model"] = type(model).__name__
            return super()._setup_model(model)

    trainer = quiet_trainer(tmp_path, strategy=Recording(), max_steps=1, limit_val_batches=0)
    assert seen["devices_at_launcher"] == [torch.device("cpu")]  # called in Trainer() with devices set
    trainer.fit(dp_module(), dp_data())
    assert seen["setup_model"] == "RegressionModule"


@pins("lightning")
def test_hparams_mixin__given_hyperparameters():
    """lit_gpu.checkpoints.net_spec reads the CLI's ``net`` config while LightningCLI builds the module."""
    from lit_gpu.cli import LitGpuCLI
    from tests.helpers.paths import CONFIGS

    cli = LitGpuCLI(
        args=["--config", str(CONFIGS / "foonet.yaml"), "--model.net.init_args.layers", "4"],
        run=False,
    )
    assert cli.model.net_spec["class_path"] == "lit_gpu.nets.FooNet"
    assert cli.model.net_spec["init_args"]["layers"] == 4


@pins("jsonargparse")
def test_jsonargparse_action__typehint():
    """lit_gpu.devices.allow_auto_precision widens ``trainer.precision``'s ``_typehint`` to auto."""
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(pl.Trainer, "trainer")
    allow_auto_precision(parser)
    assert parser.parse_args(["--trainer.precision", "auto"]).trainer.precision == "auto"
    assert parser.parse_args(["--trainer.precision", "bf16-mixed"]).trainer.precision == "bf16-mixed"


class _Stop(Exception):
    def __init__(self, config) -> None:
        self.config = config


@pins("lightning")
def test_lightning_cli__parse_ckpt_path(tmp_path, monkeypatch):
    """LitGpuCLI overrides it (lit_gpu.safe_build.check_ckpt_path): upstream, the checkpoint decides.

    Lightning's version re-parses the checkpoint's ``hyper_parameters`` over ``--config``: the recorded
    ``_class_path`` replaces the model class and its values replace the config's.
    """
    from lightning.pytorch.cli import LightningCLI

    assert "self._parse_ckpt_path()" in inspect.getsource(LightningCLI.__init__)
    assert "_parse_ckpt_path" in vars(LitGpuCLI.__mro__[1])  # lightning_cli.CLIHooks
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    hparams = {
        "_class_path": "lit_gpu.modules.ClassificationModule",
        "scheduler_interval": "step",
        "_instantiator": "lightning.pytorch.cli.instantiate_module",
    }
    torch.save({"state_dict": {}, "hyper_parameters": hparams}, tmp_path / "swap.ckpt")

    class Probe(LightningCLI):
        def before_instantiate_classes(self) -> None:
            raise _Stop(self.config)

    args = ["test", "--config", str(CONFIGS / "simple.yaml"), "--ckpt_path", str(tmp_path / "swap.ckpt")]
    with pytest.raises(_Stop) as stop:
        Probe(model_class=None, datamodule_class=None, args=args, save_config_callback=None)
    model = stop.value.config.test.model
    assert model.class_path == "lit_gpu.modules.ClassificationModule"
    assert model.init_args.scheduler_interval == "step"


@pins("lightning")
def test_model_helpers__restricted_classmethod():
    """LitModule.load_from_checkpoint keeps Lightning's class-only decorator."""
    with pytest.raises(TypeError, match="cannot be called on an instance"):
        RegressionModule(SimpleModel()).load_from_checkpoint("unused.ckpt")


@pins("lightning")
def test_saving__load_from_checkpoint(tmp_path, monkeypatch):
    """Why LitModule.load_from_checkpoint checks first: Lightning's loader imports nested class_paths.

    If this fails after an upgrade, Lightning guards nested class_paths itself; keep lit_gpu's check
    (it also reads weights-only) and update docs/checkpoints.md ("What is safe to load").
    """
    from lightning.pytorch.core.saving import _load_from_checkpoint

    name, marker = f"pin_{uuid.uuid4().hex[:8]}", tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from torch import nn
            Path({str(marker)!r}).write_text("imported")

            class Net(nn.Linear):
                def __init__(self) -> None:
                    super().__init__(10, 10)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    hparams = {
        "_class_path": "lit_gpu.modules.RegressionModule",
        "_instantiator": "lightning.pytorch.cli.instantiate_module",
        "net": {"class_path": f"{name}.Net", "init_args": {}},
    }
    state = {f"net.{k.removeprefix('fc.')}": v for k, v in SimpleModel().state_dict().items()}
    checkpoint = {
        "state_dict": state,
        "hyper_parameters": hparams,
        "pytorch-lightning_version": pl.__version__,
    }
    torch.save(checkpoint, tmp_path / "x.ckpt")
    try:
        module = _load_from_checkpoint(RegressionModule, tmp_path / "x.ckpt", weights_only=True)
        assert marker.exists() and type(module.net).__module__ == name
    finally:
        sys.modules.pop(name, None)


@pins("optuna")
def test_optuna_trial__trial_id(tmp_path):
    """lit_gpu.commands.sweep hands ``trial._trial_id`` to a trial's child process (DDP trials), which
    rebuilds the trial as ``optuna.trial.Trial(study, trial_id)`` to report each validation."""
    import optuna

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log"))
    )
    study = optuna.create_study(study_name="pin", storage=storage)
    trial = study.ask()
    in_child = optuna.trial.Trial(optuna.load_study(study_name="pin", storage=storage), trial._trial_id)
    in_child.report(0.5, 0)
    study.tell(trial, 1.0)
    assert study.trials[0].intermediate_values == {0: 0.5} and study.trials[0].value == 1.0
    # a stopped trial is continued as itself: rebuilt from its FrozenTrial's _trial_id (sweep/worker.py)
    stopped = study.ask()
    stopped.suggest_float("x", 0, 1)
    [frozen] = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]
    again = optuna.trial.Trial(study, frozen._trial_id)
    assert again.suggest_float("x", 0, 1) == stopped.params["x"]
    study.tell(again, 2.0)
    assert study.trials[1].value == 2.0


@pins("lightning")
def test_fit_loop_loader_state_internals_used_by_exact_resume():
    """lit_gpu.resume.loaders (the #20550 guard, batch-counter sync, interrupt rewind) reads these.

    Behaviour is covered by tests/unit/resume/test_resume_in_fit.py; this names what it relies on.
    """
    from lightning.pytorch.loops.fit_loop import _FitLoop
    from lightning.pytorch.loops.progress import _BatchProgress
    from lightning.pytorch.utilities.combined_loader import CombinedLoader

    assert callable(_FitLoop._load_combined_loader_states)
    loop = _FitLoop.__new__(_FitLoop)
    _FitLoop.__init__(loop, trainer=None)  # type: ignore[arg-type]
    assert loop._combined_loader is None and loop._combined_loader_states_to_load == []
    assert {"ready", "started", "processed", "completed"} <= set(vars(_BatchProgress().current))
    assert hasattr(CombinedLoader, "flattened")


@pins("lightning")
def test_fit_loop_restart_stage_after_a_save_at_an_epochs_last_batch():
    """lit_gpu.upstream.start_next_epoch_after_a_finished_one: ``_FitLoop.reset`` counts the epoch of a
    save at its last batch done but keeps ``RESTARTED_MID_EPOCH``, which makes ``on_advance_start`` skip the
    next epoch's ready/started counts. Behaviour: tests/unit/resume/test_resume_property.py
    (test_a_second_resume_after_one_from_an_epochs_last_batch)."""
    from lightning.pytorch.loops.fit_loop import _FitLoop

    source = inspect.getsource
    reset = source(_FitLoop.reset)
    stage, last = "and self.restarted_mid_epoch\n", "and self.epoch_loop.batch_progress.is_last_batch"
    assert stage in reset and last in reset
    assert "self.epoch_progress.increment_processed()" in reset
    assert "if not self.restarted_mid_epoch and not self.restarted_on_epoch_end:" in source(
        _FitLoop.on_advance_start
    )
    assert "self._restart_stage = RestartStage.NONE" in source(_FitLoop.reset_restart_stage)


@pins("lightning")
def test_trainer_step_and_epoch_counters_read_directly():
    """lit_gpu.callbacks.fresh_last and the lean step read ``trainer.max_steps``, ``global_step`` (automatic
    optimization) and ``current_epoch`` from the loop objects those properties read."""
    source = inspect.getsource
    assert "return self.fit_loop.max_steps" in source(pl.Trainer.max_steps.fget)
    assert "return self.fit_loop.epoch_progress.current.completed" in source(pl.Trainer.current_epoch.fget)
    from lightning.pytorch.loops.fit_loop import _FitLoop
    from lightning.pytorch.loops.progress import _OptimizationProgress
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    assert "return self.epoch_loop.max_steps" in source(_FitLoop.max_steps.fget)
    assert "return self.automatic_optimization.optim_progress.optimizer_steps" in source(
        _TrainingEpochLoop.global_step.fget
    )
    assert "return self.optimizer.step.total.completed" in source(_OptimizationProgress.optimizer_steps.fget)


@pins("lightning")
def test_model_checkpoint_trigger_state_used_by_fresh_last():
    """FreshLastCheckpoint.on_train_batch_end reads Lightning's step/time trigger state."""
    cb = ModelCheckpoint(every_n_train_steps=3)
    assert cb._every_n_train_steps == 3 and cb._last_time_checked is None
    assert callable(cb._monitor_candidates) and callable(cb._should_skip_saving_checkpoint)


@pins("lightning")
def test_trainer__signal_connector_received_sigterm_and_original_handlers(tmp_path):
    """lit_gpu.callbacks.CheckpointOnInterrupt sets ``_signal_connector.received_sigterm`` to stop at the
    step boundary (the loops raise ``SIGTERMException``), and edits ``_original_handlers`` so Lightning's
    teardown restores the handlers from before the run."""
    import signal

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    seen: dict[str, object] = {}

    class StopAtStep2(pl.Callback):
        def on_train_batch_end(self, trainer, *args) -> None:
            seen["originals"] = trainer._signal_connector._original_handlers
            if trainer.global_step == 2:
                trainer._signal_connector.received_sigterm = True

    trainer = quiet_trainer(tmp_path, max_epochs=1, limit_train_batches=8, callbacks=[StopAtStep2()])
    with pytest.raises(SIGTERMException):
        trainer.fit(dp_module(), dp_data())
    assert trainer.global_step == 2 and trainer.received_sigterm
    originals = seen["originals"]
    assert isinstance(originals, dict) and signal.SIGTERM in originals


def test_checkpoint_loop_state_read_by_resume_log_step(tmp_path):
    """lit_gpu.run.store.resume_log_step reads ``_batches_that_stepped`` and the batch progress of a saved
    checkpoint, to drop the metrics a stopped attempt logged after it; Lightning logs again from there."""
    from lit_gpu.run.store import resume_log_step

    cb = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}")
    trainer = quiet_trainer(
        tmp_path, max_epochs=1, limit_train_batches=4, callbacks=[cb], enable_checkpointing=True
    )
    trainer.fit(dp_module(), dp_data())
    mid = torch.load(tmp_path / "step=3.ckpt", weights_only=True)  # saved at a training batch end
    loop = mid["loops"]["fit_loop"]
    assert loop["epoch_loop.state_dict"]["_batches_that_stepped"] == 2
    assert set(loop["epoch_loop.batch_progress"]["total"]) >= {"ready", "started", "processed", "completed"}
    assert resume_log_step(mid) == 3 == mid["global_step"]
    trainer.save_checkpoint(tmp_path / "end.ckpt")  # after the fit: the counter already moved
    end = torch.load(tmp_path / "end.ckpt", weights_only=True)
    assert resume_log_step(end) == 4 == end["global_step"]


def test_call_callback_hooks__call_lightning_module_hook__skip_a_non_callable_hook(tmp_path):
    """lit_gpu.fastpath.step.SkipIdleHooks sets no-op hooks to ``None`` on the instance: Lightning's
    dispatch (``trainer/call.py``) must skip a hook attribute that is not callable."""
    from lightning.pytorch.trainer import call

    assert "callable(fn)" in inspect.getsource(call._call_callback_hooks)
    assert "callable(fn)" in inspect.getsource(call._call_lightning_module_hook)

    class Counting(pl.Callback):
        def __init__(self) -> None:
            self.starts = 0

        def on_train_batch_start(self, *args) -> None:
            self.starts += 1

    hidden, shown = Counting(), Counting()
    hidden.on_train_batch_start = None  # type: ignore[assignment]
    model = BoringModel()
    object.__setattr__(model, "on_after_backward", None)
    trainer = quiet_trainer(tmp_path, max_steps=3, callbacks=[hidden, shown])
    trainer.fit(model)
    assert (hidden.starts, shown.starts) == (0, 3)


def test_strategy_registry__register():
    """lit_gpu.strategies.dp registers ``"dp"`` through ``register_strategies(_StrategyRegistry)``."""
    from lightning.fabric.strategies import _StrategyRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    assert isinstance(StrategyRegistry, _StrategyRegistry)
    assert "dp" in StrategyRegistry and StrategyRegistry["dp"]["strategy"] is DataParallelStrategy
    registry = _StrategyRegistry()
    DataParallelStrategy.register_strategies(registry)
    assert registry.available_strategies() == ["dp"]


@pins("lightning")
def test_subprocess_script_launcher__call_children_scripts__subprocess_popen():
    """tests/helpers/forked_cli.py forks the DDP ranks of a forked run by replacing the ``subprocess`` that
    Lightning's launcher module calls ``Popen(command, env=..., cwd=...)`` on (test speed, not lit_gpu)."""
    from lightning.pytorch.strategies.launchers import subprocess_script

    assert subprocess_script.subprocess is __import__("subprocess")
    source = inspect.getsource(subprocess_script._SubprocessScriptLauncher._call_children_scripts)
    assert "subprocess.Popen(command, env=env_copy, cwd=cwd)" in source
    assert "LOCAL_RANK" in source and "_basic_subprocess_cmd()" in source


@pins("lightning")
def test_lightning_cli__add_subcommands__subcommand_parsers(tmp_path, monkeypatch):
    """LitGpuCLI._add_subcommands builds only the subcommand the command line starts with, by shadowing
    ``subcommands()`` while Lightning's ``_add_subcommands`` loops over it."""
    from lightning.pytorch.cli import LightningCLI

    assert "for subcommand in self.subcommands():" in inspect.getsource(LightningCLI._add_subcommands)
    assert "self.subcommands()[subcommand]" in inspect.getsource(LightningCLI._prepare_subcommand_parser)

    class NoRun(LitGpuCLI):
        def _run_subcommand(self, subcommand: str) -> None:
            self.ran = subcommand

    monkeypatch.chdir(tmp_path)
    cli = NoRun(args=["validate", "--config", str(CONFIGS / "simple.yaml"), "--trainer.logger", "false"])
    assert cli.ran == "validate" and set(cli._subcommand_parsers) == {"validate"}
    assert set(cli.subcommands()) == {"fit", "validate", "test", "predict"}  # the shadow is gone


@pins("lightning")
def test_automatic_optimization__run__build_kwargs__optim_progress():
    """lit_gpu.fastpath.step.LeanOptimizerStep replaces, per fit instance,
    ``_AutomaticOptimization.run`` and ``_TrainingEpochLoop._build_kwargs`` (called as
    ``self.automatic_optimization.run(optimizer, batch_idx, kwargs)`` and ``self._build_kwargs(kwargs, batch,
    batch_idx)`` from ``advance``), reads ``_skip_backward`` and moves ``optim_progress.optimizer.{step,
    zero_grad}`` as Lightning's own ``run`` does."""
    from lightning.pytorch.loops.optimization.automatic import Closure, ClosureResult, _AutomaticOptimization
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    assert list(inspect.signature(_AutomaticOptimization.run).parameters) == [
        "self",
        "optimizer",
        "batch_idx",
        "kwargs",
    ]
    assert list(inspect.signature(_TrainingEpochLoop._build_kwargs).parameters) == [
        "self",
        "kwargs",
        "batch",
        "batch_idx",
    ]
    advance = inspect.getsource(_TrainingEpochLoop.advance)
    assert "self.automatic_optimization.run(trainer.optimizers[0], batch_idx, kwargs)" in advance
    assert "self._build_kwargs(OrderedDict(), batch, batch_idx)" in advance
    source = inspect.getsource(_AutomaticOptimization)
    zero_grad = (
        "zero_grad.increment_ready()",
        "zero_grad.increment_started()",
        "zero_grad.increment_completed()",
    )
    for moved in (*zero_grad, "step.increment_ready()", "step.increment_completed()"):
        assert f"self.optim_progress.optimizer.{moved}" in source
    assert _AutomaticOptimization(quiet_trainer())._skip_backward is False
    assert list(inspect.signature(ClosureResult.from_training_step_output).parameters) == [
        "training_step_output", "normalize"]  # fmt: skip
    assert hasattr(Closure, "warning_cache")
    # the lean step builds a tensor output's result itself: the loss divided by normalize (1 there),
    # and a detached clone as ``loss``; ``asdict`` is the loss then the extras
    result_source = inspect.getsource(ClosureResult)
    assert "closure_loss = closure_loss / normalize" in result_source
    assert "self.loss = self.closure_loss.detach().clone()" in result_source
    assert 'return {"loss": self.loss, **self.extra}' in result_source
    # the lean step moves those counters itself: each increment adds 1 to the total and the current count
    from lightning.pytorch.loops.progress import _Progress

    for field in ("ready", "started", "completed"):
        body = inspect.getsource(getattr(_Progress, f"increment_{field}"))
        assert f"self.total.{field} += 1" in body and f"self.current.{field} += 1" in body


@pins("torch")
def test_enable_grad_is_set_grad_enabled_true_and_back():
    """lit_gpu.fastpath.step's lean closure enables gradients as ``torch.enable_grad()`` does, without
    its context-manager calls: ``torch._C._set_grad_enabled(True)``, then the previous mode back."""
    enter = inspect.getsource(torch.enable_grad.__enter__)
    leave = inspect.getsource(torch.enable_grad.__exit__)
    assert "self.prev = torch.is_grad_enabled()" in enter and "torch._C._set_grad_enabled(True)" in enter
    assert "torch._C._set_grad_enabled(self.prev)" in leave
    with torch.no_grad():
        torch._C._set_grad_enabled(True)
        assert torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
    assert torch.is_grad_enabled()


@pins("lightning")
def test_strategy_training_step_with_plain_precision_is_the_modules_training_step():
    """The lean step calls ``module.training_step`` itself where ``Strategy.training_step`` would only wrap
    it in the plain ``Precision``'s ``train_step_context`` (a ``nullcontext``) and the strategy's
    ``post_training_step``/``pre_backward``/``post_backward`` are Lightning's no-ops
    (``lit_gpu.fastpath.step._plain_strategy_step``)."""
    from lightning.fabric.plugins.precision import Precision as FabricPrecision
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.strategies import Strategy

    step = inspect.getsource(Strategy.training_step)
    assert "with self.precision_plugin.train_step_context():" in step
    assert "return self.lightning_module.training_step(*args, **kwargs)" in step
    assert "with self.forward_context():" in inspect.getsource(Precision.train_step_context)
    assert Precision.forward_context is FabricPrecision.forward_context
    assert "return nullcontext()" in inspect.getsource(FabricPrecision.forward_context)
    for hook in ("post_training_step", "pre_backward", "post_backward"):
        body = [
            line.strip()
            for line in inspect.getsource(getattr(Strategy, hook)).splitlines()[1:]
            if line.strip() and not line.strip().startswith(("def ", '"""', "Run ", "Override ", "This hook"))
        ]
        assert body in ([], ["pass"]), (hook, body)


@pins("lightning")
def test_strategy__lightning_optimizers__on_before_step_do_nothing(tmp_path):
    """LeanOptimizerStep stands aside unless the ``LightningOptimizer`` wrapper's step hooks
    (``_on_before_step``/``_on_after_step``) are Lightning's ``do_nothing_closure``, as they are in
    automatic optimization; the wrapper list is the strategy's private ``_lightning_optimizers``."""
    from lightning.pytorch.core.optimizer import do_nothing_closure

    from lit_gpu.fastpath.step import LeanOptimizerStep

    seen = []

    class Look(pl.Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            wrapper = trainer.strategy._lightning_optimizers[0]
            seen.append(
                (wrapper._on_before_step is do_nothing_closure, wrapper._on_after_step is do_nothing_closure)
            )

    step = LeanOptimizerStep()
    quiet_trainer(tmp_path, max_steps=1, callbacks=[Look(), step]).fit(BoringModel())
    assert seen == [(True, True)] and step.blocker is None


@pins("lightning")
def test_lightning_module__current_fx_name():
    """lit_gpu.fastpath.PlainHookName stores ``_current_fx_name`` with ``object.__setattr__``: it
    must be a plain instance attribute that Lightning's dispatch sets around every hook call."""
    from lightning.pytorch.trainer import call

    module = RegressionModule(SimpleModel())
    assert "_current_fx_name" in vars(module) and module._current_fx_name is None
    assert not hasattr(type(module), "_current_fx_name")  # no property or descriptor on the class
    assert "pl_module._current_fx_name = hook_name" in inspect.getsource(call._call_lightning_module_hook)


@pins("lightning")
def test_model_checkpoint__on_train_batch_end_without_a_step_or_time_trigger_changes_nothing(tmp_path):
    """lit_gpu.callbacks.fresh_last.FreshLastCheckpoint skips Lightning's ``on_train_batch_end`` when it has
    no step or time trigger (``_every_n_train_steps < 1``, ``_train_time_interval`` None) in automatic
    optimization: there Lightning's hook must only read state and return."""
    changed: list[str] = []

    class Watch(ModelCheckpoint):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            before = dict(vars(self))
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            changed.extend(k for k, v in vars(self).items() if k not in before or before[k] is not v)

        def _save_checkpoint(self, trainer, filepath) -> None:
            changed.append(f"saved at step {trainer.global_step}")

    watch = Watch(dirpath=tmp_path, save_last=True)
    assert watch._every_n_train_steps == 0 and watch._train_time_interval is None  # the defaults
    quiet_trainer(tmp_path, max_steps=5, enable_checkpointing=True, callbacks=[watch]).fit(BoringModel())
    assert [c for c in changed if not c.startswith("saved")] == []


@pins("lightning")
def test_training_epoch_loop__advance__as_lean_training_batch_mirrors_it(tmp_path):
    """lit_gpu.fastpath.batch.LeanTrainingBatch reproduces ``_TrainingEpochLoop.advance`` and
    ``on_advance_end`` and the logger connector's batch methods of the Lightning releases whose source
    digest it names (it stands aside on any other), and reads these private members while a fit runs."""
    from lightning.fabric.utilities.apply_func import _BLOCKING_DEVICE_TYPES
    from lightning.pytorch.loops.fetchers import _PrefetchDataFetcher
    from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultMetric

    update = _ResultMetric.update  # a step value's tensor is a fresh clone at each self.log

    assert gate.problem("fast path") is None
    assert _BLOCKING_DEVICE_TYPES == ("cpu", "mps")
    seen = {}

    class Look(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            loop, connector = trainer.fit_loop.epoch_loop, trainer._logger_connector
            seen["members"] = (
                isinstance(loop._restarting, bool),
                isinstance(loop._skip_next_val, bool),
                isinstance(loop._batches_that_stepped, int),
                loop._results is trainer._results,
                isinstance(connector._first_loop_iter, bool),
                all(
                    isinstance(getattr(connector, f"_{k}_metrics"), dict)
                    for k in ("callback", "logged", "progress_bar")
                ),
                trainer._data_connector._datahook_selector.get_instance("transfer_batch_to_device")
                is pl_module,
                trainer._val_check_time_interval is None,
                isinstance(trainer.strategy.lr_scheduler_configs, list),
                callable(loop._should_check_val_epoch),
                # read by _batch_metrics, beside _ResultCollection.metrics (in the digest)
                isinstance(trainer._results.training, bool),
                callable(trainer._results._get_cache) and callable(trainer._results._forked_name),
                "self._forward_cache = self.meta.sync(value.clone())" in inspect.getsource(update),
                # read by run/_done and _fetch (their uses are in the digest's methods)
                isinstance(loop._restart_stage, str),
                isinstance(loop.val_loop._has_run, bool),
                trainer.fit_loop.max_batches == trainer.num_training_batches,
                loop.automatic_optimization.optim_progress.optimizer.step.total.completed
                == trainer.global_step,
                isinstance(trainer.fit_loop._data_fetcher.iterator._iterator.iterators, list),
                isinstance(trainer.fit_loop._data_fetcher.iterator._iterator._consumed, list),
                isinstance(trainer.fit_loop._data_fetcher.batches, list),
                trainer.fit_loop._data_fetcher.length == 64,
            )
            seen["fetcher"] = type(trainer.fit_loop._data_fetcher)

    quiet_trainer(tmp_path, max_steps=1, callbacks=[Look()]).fit(BoringModel())
    assert all(seen["members"]) and seen["fetcher"] is _PrefetchDataFetcher


@pins("torch")
def test_allocator_settings_at_run_time_as_oom_recovery_sets_them():
    """lit_gpu.oom.recovery turns ``expandable_segments`` on and off at run time through torch's
    private allocator-settings setter (``torch._C._accelerator_setAllocatorSettings``, before torch 2.9
    ``torch.cuda.memory._set_allocator_settings``), which parses the key (an unknown one raises)."""
    from lit_gpu.oom.recovery import _set_allocator_settings

    _set_allocator_settings("expandable_segments:False")  # PyTorch's default: changes nothing here
    with pytest.raises((ValueError, RuntimeError), match="never_a_key"):
        _set_allocator_settings("never_a_key:True")


@pins("lightning")
def test_callback_and_model_hooks_batch_hooks_are_empty():
    """lit_gpu.fastpath.step.HookDispatch (the lean batch and step) skips a callback's or module's
    batch hook that is Lightning's own ``Callback``/``ModelHooks`` method: those bodies do nothing."""
    import ast

    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.core.hooks import ModelHooks

    from lit_gpu.fastpath.step import BATCH_HOOKS, MODULE_HOOKS

    for base, hooks in ((Callback, BATCH_HOOKS), (ModelHooks, MODULE_HOOKS)):
        for name in hooks:
            tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(base, name))))
            body = tree.body[0].body
            statements = [
                node
                for node in body
                if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
                and not isinstance(node, ast.Pass)
            ]
            assert statements == [], f"{base.__name__}.{name} does something now"


@pins("lightning")
def test_trainer__detect_anomaly(tmp_path):
    """lit_gpu.upstream.detect_anomaly reads ``Trainer._detect_anomaly`` (NaNGuard defers to it)."""
    from lit_gpu.upstream import detect_anomaly

    assert detect_anomaly(pl.Trainer(detect_anomaly=True, logger=False, default_root_dir=tmp_path)) is True
    assert detect_anomaly(pl.Trainer(logger=False, default_root_dir=tmp_path)) is False
    assert "set_detect_anomaly(self._detect_anomaly)" in inspect.getsource(pl.Trainer._run_stage)


@pins("lightning")
def test_abstract_closure__consume_result_raises_when_not_run():
    """lit_gpu.fastpath.step raises Lightning's own "closure hasn't been executed" through
    ``AbstractClosure.consume_result`` with ``_result`` None."""
    from types import SimpleNamespace

    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.loops.optimization.closure import AbstractClosure

    with pytest.raises(MisconfigurationException, match="The closure hasn't been executed"):
        AbstractClosure.consume_result(SimpleNamespace(_result=None))


class _LogsEverything(pl.LightningModule):
    """``self.log`` of a mean, a max and a torchmetrics object, on step and on epoch."""

    def __init__(self) -> None:
        super().__init__()
        from torchmetrics import MeanMetric

        self.net = torch.nn.Linear(10, 10)
        self.mean = MeanMetric()

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.mean.update(loss.detach() * 2)
        self.log("loss", loss, on_step=True, on_epoch=True)
        self.log("peak", loss, on_step=False, on_epoch=True, reduce_fx="max")
        self.log("doubled", self.mean, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pins("lightning")
def test_result_collection__result_metric__metadata__sync__first_loop_iter(tmp_path):
    """lit_gpu.resume.state rebuilds the training loop's ``_ResultCollection`` entries
    (``_ResultMetric(_Metadata, is_tensor)`` with ``_Sync``, its ``value``, ``cumulated_batch_size``,
    ``_forward_cache``, ``_update_count``, ``has_reset``) and sets the logger connector's
    ``_first_loop_iter``: a fit resumed mid-epoch logs the epoch aggregates of the uninterrupted one."""
    from lit_gpu.callbacks import LoggingStateCallback
    from lit_gpu.data import SyntheticRegressionDataModule
    from lit_gpu.resume.state import LOGGING_STATE_KEY

    def fit(root, ckpt_path=None) -> dict[str, float]:
        saves = ModelCheckpoint(dirpath=root, every_n_train_steps=11, save_top_k=-1, filename="{step}")
        trainer = quiet_trainer(
            root, max_epochs=2, callbacks=[LoggingStateCallback(), saves], enable_checkpointing=True
        )
        torch.manual_seed(0)
        data = SyntheticRegressionDataModule(num_samples=256, batch_size=32, shuffle=False)
        trainer.fit(_LogsEverything(), data, ckpt_path=ckpt_path)
        return {k: float(v) for k, v in trainer.logged_metrics.items()}

    reference = fit(tmp_path / "reference")
    mid_epoch = tmp_path / "reference" / "step=11.ckpt"  # 8 batches an epoch: the 4th of the second
    state = torch.load(mid_epoch, weights_only=True)[LOGGING_STATE_KEY]
    assert {entry["name"] for entry in state["results"]} == {"loss", "peak", "doubled"}
    assert state["metrics"]["mean"]["update_count"] == 3
    resumed = fit(tmp_path / "resumed", ckpt_path=mid_epoch)
    assert {"loss_epoch", "peak", "doubled"} <= set(resumed)
    for key in ("loss_epoch", "peak", "doubled"):
        assert resumed[key] == pytest.approx(reference[key], rel=1e-6), key


@pins("torch")
def test_dataloader_get_iterator__set_sigchld_handler():
    """lit_gpu.preemption starts a protected loader's workers with SIGINT/SIGTERM blocked by wrapping
    ``DataLoader._get_iterator`` (``__iter__`` calls it to start workers); lit_gpu.preemption puts
    its own SIGCHLD handler over torch's, installed first with
    ``torch.utils.data._utils.signal_handling._set_SIGCHLD_handler`` (once per process), whose report of a
    worker killed by a signal reads ``killed by signal: <strsignal>``."""
    from torch.utils.data import DataLoader
    from torch.utils.data._utils import signal_handling

    assert "self._get_iterator()" in inspect.getsource(DataLoader.__iter__)
    assert callable(signal_handling._set_SIGCHLD_handler)
    assert isinstance(signal_handling._SIGCHLD_handler_set, bool)


@pins("lightning")
def test_fit_loop__setup_data__load_combined_loader_states():
    """lit_gpu.resume.plain's train loaders: setup_data builds the train loaders, then calls the loop's
    ``_load_combined_loader_states`` (looked up on the instance), then creates their iterator."""
    from lightning.pytorch.loops.fit_loop import _FitLoop

    source = inspect.getsource(_FitLoop.setup_data)
    built = source.index("combined_loader.flattened = dataloaders")
    loaded = source.index("self._load_combined_loader_states()")
    iterated = source.index("iter(self._data_fetcher)")
    assert built < loaded < iterated
    assert "self._combined_loader = combined_loader" in source[:loaded]


@pins("lightning")
def test_evaluation_loop__seen_batches_per_dataloader():
    """lit_gpu.resume.state.val_steps: the step of per-step validation rows is this counter,
    zeroed when the loop builds its loaders, logged at and incremented after each batch."""
    from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop

    zeroed = "self._seen_batches_per_dataloader = defaultdict(int)"
    assert zeroed in inspect.getsource(_EvaluationLoop.setup_data)
    source = inspect.getsource(_EvaluationLoop._evaluation_step)
    assert "update_eval_step_metrics(self._seen_batches_per_dataloader[dataloader_idx])" in source
    assert "self._seen_batches_per_dataloader[dataloader_idx] += 1" in source


@pins("lightning")
def test_checkpoint_connector__hpc_resume_path(tmp_path, monkeypatch):
    """lit_gpu.cli.lightning_cli.no_cluster_resume turns ``_checkpoint_connector._hpc_resume_path`` off."""
    from lit_gpu.cli.lightning_cli import no_cluster_resume

    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    (tmp_path / "hpc_ckpt_3.ckpt").write_bytes(b"x")
    trainer = pl.Trainer(default_root_dir=tmp_path, logger=False, enable_checkpointing=False)
    connector = trainer._checkpoint_connector
    assert isinstance(type(connector).__dict__["_hpc_resume_path"], property)
    assert connector._hpc_resume_path == str(tmp_path / "hpc_ckpt_3.ckpt")
    no_cluster_resume(trainer)
    no_cluster_resume(trainer)  # once is enough; twice changes nothing
    assert trainer._checkpoint_connector._hpc_resume_path is None
    assert type(trainer._checkpoint_connector).__mro__[1] is type(pl.Trainer()._checkpoint_connector)


@pins("torch")
def test_torch_chained_schedulers_keep_their_children_in__schedulers():
    """lit_gpu/upstream.py (scheduler_children): SequentialLR and ChainedScheduler keep their
    children in ``_schedulers`` and their states under ``state_dict()["_schedulers"]``, in order."""
    from torch.optim import lr_scheduler as s

    from lit_gpu.upstream import scheduler_children

    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    children = [s.StepLR(optimizer, 2), s.ExponentialLR(optimizer, 0.9)]
    for parent in (s.SequentialLR(optimizer, children, [3]), s.ChainedScheduler(children)):
        pairs = scheduler_children(parent.state_dict(), parent)
        assert [child for _, child in pairs] == children
        assert [state for state, _ in pairs] == [child.state_dict() for child in children]


@pins("torch")
def test_torch_pytorch_file_reader():
    """lit_gpu/checkpoints/scan.py (torch_records): torch's zip reader over a buffer lists, sizes, places
    and reads records as ``torch.load`` reads them, and finds a member by its name ignoring letter case."""
    import io
    import zipfile

    from lit_gpu.checkpoints.scan import torch_records

    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buffer)
    data = buffer.getvalue()
    archive = torch_records(data)
    records = {r.name: r for r in archive.records()}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = z.getinfo("archive/data.pkl")
        assert archive.read("data.pkl") == z.read(info)
    assert {"data.pkl", "data/0", "byteorder"} <= set(records)
    assert (
        records["data/0"].size == 12
        and data[records["data/0"].offset :][:12] == torch.arange(3.0).numpy().tobytes()
    )
    # why member names must differ by more than letter case
    assert torch._C.PyTorchFileReader(io.BytesIO(data)).has_record("DATA.PKL")


@pins("jsonargparse")
def test_loaders_dumpers__get_yaml_default_loader():
    """lit_gpu.cli.config_files reads configs with jsonargparse's YAML resolvers (a float, no timestamps)."""
    import yaml
    from jsonargparse._loaders_dumpers import get_yaml_default_loader

    loader = get_yaml_default_loader()
    assert issubclass(loader, yaml.SafeLoader) or loader.__mro__[1].__name__ == "CSafeLoader"
    assert yaml.load("a: 1e-3\nb: 2024-01-01\n", Loader=loader) == {"a": 0.001, "b": "2024-01-01"}  # noqa: S506


@pins("jsonargparse")
def test_core__parse_path_contexts():
    """lit_gpu.upstream.jsonargparse_config_contexts sets the two contexts jsonargparse's parse_path
    sets around parsing a file's text (lit_gpu reads the text itself, once, with its bounded reader)."""
    import inspect

    from jsonargparse import ArgumentParser
    from jsonargparse._optionals import _get_config_read_mode
    from jsonargparse._paths import change_to_path_dir
    from jsonargparse._util import load_config_path_context

    source = inspect.getsource(ArgumentParser.parse_path)
    assert "with load_config_path_context(fpath), change_to_path_dir(fpath):" in source
    assert "Path(path, mode=_get_config_read_mode())" in source
    assert callable(load_config_path_context) and callable(change_to_path_dir)
    assert "f" in _get_config_read_mode()


@pins("jsonargparse")
def test_paths__path_read_text_and_std_io(tmp_path):
    """lit_gpu.upstream.jsonargparse_bounded_reads swaps ``Path.read_text`` (every sub-config read goes
    through it) and leaves standard input (``_std_io``), URLs and fsspec paths to it."""
    import inspect

    from jsonargparse import Path, _typehints, _util

    config = tmp_path / "x.yaml"
    config.write_text("a: 1\n")
    path = Path(str(config), mode="fr")
    assert path._std_io is False and path.is_url is False and path.is_fsspec is False
    assert path.absolute == str(config) and path.read_text() == "a: 1\n"
    assert Path("-", mode="fr")._std_io is True
    assert "load_value(path.read_text())" in inspect.getsource(_typehints)
    assert "load_value(cfg_path.read_text()" in inspect.getsource(_util.parse_value_or_config)
