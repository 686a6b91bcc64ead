"""``lit_gpu.cli.errors``: jsonargparse's real reason survives the one-line answer."""

from __future__ import annotations

import pytest
import yaml
from jsonargparse import ArgumentError, ArgumentParser
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable

from lit_gpu.cli.errors import DEPENDENCY_MISSING, concise_parse_error, explain_cause, yaml_error


def _parse_error(args: list[str]) -> str:
    """The multi-line message jsonargparse itself produces for ``args``."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--model", type=LightningModule | None)
    parser.add_argument("--optimizer", type=OptimizerCallable)
    parser.add_argument("--scheduler", type=LRSchedulerCallable | None)
    with pytest.raises(ArgumentError) as info:
        parser.parse_args(args)
    return str(info.value)


@pytest.mark.parametrize(
    "args, needles",
    [
        (
            ["--model", "mymod.MyModule"],
            ["model: cannot import mymod.MyModule", "No module named 'mymod'", "PYTHONPATH=.", "pip install"],
        ),
        (
            ["--model", "lit_gpu.modules.ClassificationModul"],
            [
                "module 'lit_gpu.modules' has no attribute 'ClassificationModul'",
                "did you mean lit_gpu.modules.ClassificationModule?",
            ],
        ),
        (
            ["--optimizer", "torch.optim.Adamm"],
            ["optimizer: module 'torch.optim' has no attribute 'Adamm'", "did you mean torch.optim.Adam?"],
        ),
        (
            ["--model", "lit_gpu.modules.RegressionModule", "--model.net", "lit_gpu.nets.SimpleModel"]
            + ["--model.optimizer.lrr", "0.1"],
            ["model.optimizer: torch.optim.Adam has no argument 'lrr' (did you mean lr?)"],
        ),
        (["--model", "torch.nn.Linear"], ["model: torch.nn.Linear is not a LightningModule"]),
        (
            ["--scheduler", "torch.optim.lr_scheduler.StepLR"],
            ["scheduler: torch.optim.lr_scheduler.StepLR needs step_size", "--scheduler.init_args.step_size"],
        ),
    ],
)
def test_class_path_problems_keep_their_cause(args, needles):
    message = _parse_error(args)
    assert "Expected a NoneType" not in (line := concise_parse_error(message, "lit-gpu fit"))
    assert "\n" not in line
    for needle in needles:
        assert needle in line, line


def test_a_missing_dependency_of_the_users_module_names_that_dependency(tmp_path, monkeypatch):
    (tmp_path / "usermod_needs_dep.py").write_text("import not_installed_pkg_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    line = explain_cause(_parse_error(["--model", "usermod_needs_dep.MyModule"]))
    assert line == DEPENDENCY_MISSING.format(
        key="model", class_path="usermod_needs_dep.MyModule", module="not_installed_pkg_xyz"
    )


def test_a_bad_value_names_the_innermost_key_what_was_expected_and_given():
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--model", type=LightningModule | None)
    with pytest.raises(ArgumentError) as info:
        parser.parse_args(
            ["--model", "lit_gpu.modules.RegressionModule", "--model.net", "lit_gpu.nets.SimpleModel"]
            + ["--model.optimizer", "torch.optim.SGD", "--model.optimizer.lr", "abc"]
        )
    line = concise_parse_error(str(info.value), "lit-gpu fit")
    assert line.startswith('Parser key "model.optimizer.lr"; Expected a float; Given value: abc'), line
    assert "NestedArg" not in line and "NoneType" not in line


def test_other_messages_keep_the_first_line_and_the_help_hint():
    line = concise_parse_error("Subcommand 'fit' does not accept option 'trainer.x'", "lit-gpu fit")
    assert (
        line
        == "Subcommand 'fit' does not accept option 'trainer.x'; run 'lit-gpu fit --help' for the options"
    )
    assert explain_cause("Parser key \"trainer.max_epochs\":\n  Expected a <class 'int'>") is None


def test_yaml_error_names_file_line_and_problem():
    try:
        yaml.safe_load("a:\n  b: {c: 1\n  d: [\n")
    except yaml.YAMLError as cause:
        err = TypeError(f"Problems parsing config: {cause}")
        err.__cause__ = cause
    line = yaml_error(err, "configs/mine.yaml")
    assert line is not None and line.startswith("configs/mine.yaml, line ")
    assert "YAML syntax error" in line and "flow mapping started at line 2" in line
    assert yaml_error(TypeError("no cause"), "x.yaml") is None


def test_unknown_flags_names_each_flag_with_the_closest_option():
    """argparse's ``unrecognized arguments`` as one line: each flag, its closest real option, exact flags."""
    import argparse

    from lit_gpu.cli.errors import unknown_flags

    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--trainer.max_epochs")
    parser.add_argument("--checkpoint.monitor")
    message = "unrecognized arguments: --trainer.max_epoch 3 --chekpoint.monitor=val/acc --zzz"
    line = unknown_flags(message, parser, "lit-gpu fit")
    assert line is not None and "\n" not in line
    assert "unknown flag --trainer.max_epoch (did you mean --trainer.max_epochs?)" in line
    assert "unknown flag --chekpoint.monitor (did you mean --checkpoint.monitor?)" in line
    assert "unknown flag --zzz;" in line and "no abbreviations" in line and "lit-gpu fit --help" in line
    assert unknown_flags("unrecognized arguments: 3", parser, "lit-gpu fit") is None
    key = unknown_flags("Subcommand 'fit' does not accept option 'trainer.max_epoch'", parser, "lit-gpu fit")
    assert key == (
        "Subcommand 'fit' does not accept option 'trainer.max_epoch' (did you mean trainer.max_epochs?); "
        "run 'lit-gpu fit --help' for the options"
    )  # the same key in a config file
    assert unknown_flags('Parser key "x": Expected int', parser, "lit-gpu fit") is None


def _cli_error(tmp_path, monkeypatch, capsys, args):
    from lit_gpu.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["fit", "--model", "lightning.pytorch.demos.boring_classes.BoringModel", *args, "--print_config"]
        )
    assert exit_info.value.code == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("lit-gpu: error:")]
    return line


def test_a_typo_in_an_appended_callbacks_argument_names_that_callback_and_the_closest(
    tmp_path, monkeypatch, capsys
):
    """``--trainer.callbacks+=EarlyStopping --trainer.callbacks.monitr x`` named ``lightning.Callback`` (the
    base, jsonargparse's last try) and no suggestion; the class is the one the error was given."""
    for args in (["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitr", "x"],
                 ["--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
                  "--trainer.callbacks.init_args.monitr", "x"]):  # fmt: skip
        line = _cli_error(tmp_path, monkeypatch, capsys, args)
        assert (
            "lightning.pytorch.callbacks.EarlyStopping has no argument 'monitr' (did you mean monitor?)"
            in line
        )


def test_a_typo_under_a_config_files_group_gets_the_closest_key(tmp_path, monkeypatch, capsys):
    (tmp_path / "typo.yaml").write_text("trainer:\n  max_epoch: 3\n")
    line = _cli_error(tmp_path, monkeypatch, capsys, ["--config", "typo.yaml"])
    assert "does not accept option 'max_epoch' (did you mean trainer.max_epochs?)" in line
