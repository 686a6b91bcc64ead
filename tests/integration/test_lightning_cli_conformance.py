"""``lit-gpu`` is still LightningCLI (issue 55): what a LightningCLI user relies on works the same through it.

``--optimizer``/``--lr_scheduler`` train with what they name; a subclass overriding LightningCLI's hooks
without ``super()`` keeps lit_gpu's arguments and run folder; ``trainer_class`` may be a factory or a
Trainer with a narrower ``__init__``; ``--trainer.fast_dev_run`` writes no checkpoint; a run's
``config.yaml`` is never silently replaced. Lightning's own CLI tests run through ``LitGpuCLI`` in
``.ci/lightning_cli_tests.py``.
"""

from __future__ import annotations

import pytest
import torch
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.demos.boring_classes import BoringModel

from lit_gpu.callbacks.fresh_last import FreshLastCheckpoint
from lit_gpu.cli import LitGpuCLI, main

BORING = ["--model", "lightning.pytorch.demos.boring_classes.BoringModel"]
SHORT = [
    "--trainer.max_epochs",
    "2",
    "--trainer.limit_train_batches",
    "2",
    "--trainer.limit_val_batches",
    "1",
]


def _ckpts(root) -> list:
    return sorted(p.relative_to(root) for p in root.rglob("*.ckpt"))


def test_optimizer_and_lr_scheduler_flags_train_with_what_they_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["fit", *BORING, *SHORT, "--optimizer", "Adam", "--optimizer.lr", "0.01"]
    args += ["--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "1", "--lr_scheduler.gamma", "0.5"]
    cli = LitGpuCLI(args=args)
    (optimizer,) = cli.trainer.optimizers
    (config,) = cli.trainer.lr_scheduler_configs
    assert type(optimizer) is torch.optim.Adam
    assert type(config.scheduler) is torch.optim.lr_scheduler.StepLR
    assert cli.trainer.global_step == 4
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**2)  # stepped at each epoch's end
    saved = yaml.safe_load((tmp_path / "runs" / "lit_gpu" / "version_0" / "config.yaml").read_text())
    assert saved["optimizer"]["class_path"] == "torch.optim.Adam"  # the run's config records it
    assert saved["lr_scheduler"]["class_path"] == "torch.optim.lr_scheduler.StepLR"


class _OwnHooksCLI(LitGpuCLI):
    """LightningCLI's documented pattern: hooks overridden without ``super()``."""

    calls: list[str]

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_optimizer_args(torch.optim.Adam)
        parser.add_argument("--note", type=str, default="mine")

    def before_instantiate_classes(self) -> None:
        self.calls = ["before_instantiate_classes"]

    def before_fit(self) -> None:
        self.calls.append("before_fit")


def test_a_subclass_overriding_hooks_without_super_keeps_lit_gpu_and_lightning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = _OwnHooksCLI(args=["fit", *BORING, *SHORT, "--optimizer.lr", "0.02"])
    assert cli.calls == ["before_instantiate_classes", "before_fit"]
    (optimizer,) = cli.trainer.optimizers
    assert (
        type(optimizer) is torch.optim.Adam and optimizer.param_groups[0]["lr"] == 0.02
    )  # add_optimizer_args
    assert cli.config.fit.note == "mine"
    assert isinstance(cli.trainer.checkpoint_callback, FreshLastCheckpoint)  # lit_gpu's checkpoint group
    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert "free_gpus" in saved and saved["seed_everything"] == 42  # lit_gpu's own steps ran
    assert (run / "checkpoints" / "last.ckpt").is_file()


def build_trainer(max_steps: int = 2, limit_val_batches: int = 1) -> Trainer:
    """A Trainer factory, as LightningCLI's ``trainer_class`` accepts: only these two are options."""
    return Trainer(
        max_steps=max_steps, limit_val_batches=limit_val_batches, logger=False, enable_progress_bar=False
    )


class NarrowTrainer(Trainer):
    """A Trainer subclass whose ``__init__`` takes no ``default_root_dir``, ``callbacks`` or ``logger``."""

    def __init__(self, max_steps: int = 2) -> None:
        super().__init__(max_steps=max_steps, limit_val_batches=1, logger=False, enable_progress_bar=False)


@pytest.mark.parametrize("trainer_class", [build_trainer, NarrowTrainer])
def test_trainer_class_a_factory_or_a_narrower_trainer(trainer_class, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="does not expose the `callbacks` argument"):  # as in LightningCLI
        cli = LitGpuCLI(args=["fit", *BORING, "--trainer.max_steps", "3"], trainer_class=trainer_class)
    assert isinstance(cli.trainer, Trainer) and cli.trainer.global_step == 3
    assert "trainer.default_root_dir" not in cli.config.fit.as_flat()  # no option the class lacks
    with pytest.raises(SystemExit) as info:  # an option the class lacks is the parser's one line
        LitGpuCLI(args=["fit", *BORING, "--trainer.max_epochs", "1"], trainer_class=trainer_class)
    assert info.value.code == 2


def test_fast_dev_run_writes_no_checkpoint_and_no_resume_line(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    cli = LitGpuCLI(args=["fit", *BORING, "--trainer.fast_dev_run", "1"])
    assert cli.trainer.global_step == 1
    assert _ckpts(tmp_path) == []
    out, err = capfd.readouterr()
    assert "resume:" not in out + err and "last.ckpt" not in out + err
    assert not list(tmp_path.rglob("config.yaml"))  # LightningCLI saves no config either


def test_a_run_s_config_is_never_silently_replaced(tmp_path, monkeypatch, capsys):
    """Runs that share a folder (no lit_gpu loggers) stop before the second overwrites the first's config."""
    monkeypatch.chdir(tmp_path)
    args = ["fit", *BORING, *SHORT, "--trainer.logger", "false"]
    main(args)
    saved = tmp_path / "runs" / "config.yaml"
    first = saved.read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main([*args, "--trainer.max_epochs", "1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Aborting to avoid overwriting" in errors[0], err
    assert str(saved.relative_to(tmp_path)) in errors[0]
    assert saved.read_text() == first
    evaluate = ["test", *BORING, "--trainer.logger", "false", "--trainer.limit_test_batches", "1"]
    main(evaluate)  # an evaluation in that folder saves its (changed) config beside, as a continued run does
    assert saved.read_text() == first and (tmp_path / "runs" / "config.1.yaml").is_file()
    main([*args, "--trainer.default_root_dir", "other"])  # the fix the line names
    assert (tmp_path / "other" / "config.yaml").is_file()


def test_model_class_as_in_lightning_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = LitGpuCLI(model_class=BoringModel, args=SHORT, run=False)  # LightningCLI's model_class
    assert type(cli.model) is BoringModel
    assert cli.config.trainer.max_epochs == 2
