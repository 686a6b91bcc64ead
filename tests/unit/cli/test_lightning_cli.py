"""The CLI composes configs in order, round-trips --print_config, and instantiates every YAML."""

from pathlib import Path

import pytest
import torch
import yaml

from lit_gpu.callbacks.guarantees import GUARANTEES, SWITCH
from lit_gpu.cli import LitGpuCLI, main
from lit_gpu.cli.lightning_cli import DEFAULT_CALLBACKS, STEP_PATH_CALLBACKS
from tests.helpers.paths import CONFIGS

FULL_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if "model" in yaml.safe_load(p.read_text()))
# configs/sweeps/ holds search spaces for `lit-gpu sweep --search`, not lit-gpu configs
SEARCH_SPACES = set((CONFIGS / "sweeps").rglob("*.yaml"))
PARTIAL_CONFIGS = sorted(set(CONFIGS.rglob("*.yaml")) - set(FULL_CONFIGS) - SEARCH_SPACES)


def _every(paths: list[Path]) -> list:
    """Each config a parameter; the first of each folder is the inner loop's sample (``--fast``), the others
    are marked ``integration``: ``pytest`` goes through every shipped config."""
    firsts = {}
    for path in paths:
        firsts.setdefault(path.parent, path)
    sample = set(firsts.values())
    return [pytest.param(p, marks=() if p in sample else pytest.mark.integration) for p in paths]


def print_config(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(["fit", *args, "--print_config"])
    assert info.value.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.integration  # trains for seconds: not the inner loop (--fast)
def test_configs_compose_in_order(capsys):
    out = yaml.safe_load(
        print_config(
            [
                "--config",
                str(CONFIGS / "simple.yaml"),
                "--config",
                str(CONFIGS / "trainer/ddp.yaml"),
                "--config",
                str(CONFIGS / "trainer/bf16.yaml"),
                "--trainer.max_epochs",
                "3",
            ],
            capsys,
        )
    )
    assert out["trainer"]["strategy"] == "ddp"
    assert out["trainer"]["sync_batchnorm"] is True
    assert out["trainer"]["precision"] == "bf16-mixed"
    assert out["trainer"]["max_epochs"] == 3  # later args win
    assert out["model"]["init_args"]["net"]["class_path"] == "lit_gpu.nets.SimpleModel"


def test_defaults_seed_logger_checkpoint(capsys):
    out = yaml.safe_load(print_config(["--config", str(CONFIGS / "mnist.yaml")], capsys))
    assert out["seed_everything"] == 42
    assert out["trainer"]["logger"] is None and out["loggers"] == ["csv", "tensorboard"]  # lit_gpu's loggers
    assert out["trainer"]["default_root_dir"] == "runs"
    assert out["checkpoint"]["monitor"] == "val/acc" and out["checkpoint"]["mode"] == "max"
    assert out["checkpoint"]["save_last"] is True


@pytest.mark.parametrize("config", _every(FULL_CONFIGS), ids=lambda p: p.name)
def test_print_config_round_trips(config: Path, tmp_path, capsys):
    first = print_config(["--config", str(config)], capsys)
    saved = tmp_path / "printed.yaml"
    saved.write_text(first)
    assert print_config(["--config", str(saved)], capsys) == first


@pytest.mark.parametrize("config", _every(FULL_CONFIGS), ids=lambda p: p.name)
def test_full_configs_instantiate(config: Path, tmp_path, monkeypatch, fake_mnist_dir):
    monkeypatch.chdir(tmp_path)
    args = ["--config", str(config), "--config", str(CONFIGS / "debug.yaml")]
    if "MNIST" in config.read_text():
        args += ["--data.data_dir", str(fake_mnist_dir), "--data.download", "false"]
    cli = LitGpuCLI(args=args, run=False)
    assert cli.model.net is not None
    assert cli.datamodule is not None
    assert cli.trainer.max_epochs == 2


@pytest.mark.parametrize("config", _every(PARTIAL_CONFIGS), ids=lambda p: str(p.relative_to(CONFIGS)))
def test_partial_configs_instantiate_on_cpu(config: Path, tmp_path, monkeypatch, capsys):
    """Every trainer/model/data fragment composes with simple.yaml; GPU-only ones parse."""
    monkeypatch.chdir(tmp_path)
    base = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(config)]
    printed = yaml.safe_load(print_config(base, capsys))
    fragment = yaml.safe_load(config.read_text()) or {}
    for key, value in (fragment.get("trainer") or {}).items():
        if isinstance(value, dict):  # class_path + init_args: printed adds the defaults
            assert printed["trainer"][key]["class_path"] == value["class_path"], key
            assert value.get("init_args", {}).items() <= printed["trainer"][key]["init_args"].items()
        else:
            assert printed["trainer"][key] == value, key
    trainer_cfg = fragment.get("trainer") or {}
    if trainer_cfg.get("accelerator") == "gpu" or "fsdp" in str(trainer_cfg.get("strategy", "")):
        return  # GPU-only: parsing is what can be checked here (GPU tests cover the rest)
    cli = LitGpuCLI(args=[*base, "--trainer.accelerator", "cpu"], run=False)
    assert cli.trainer is not None


def test_args_from_python_give_no_misfiring_warning(monkeypatch, tmp_path, recwarn):
    """In a notebook sys.argv holds the kernel's flags; LitGpuCLI(args=...) is still the intended use."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ipykernel_launcher.py", "-f", "kernel.json"])
    LitGpuCLI(
        args=["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")], run=False
    )
    assert not [w for w in recwarn if "args parameter is intended" in str(w.message)]


# ---- lit_gpu's callbacks: the guarantees always on, the step-path defaults printed and removable ---------
SIMPLE_DEBUG = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


def _lit_gpu_callbacks(cli: LitGpuCLI) -> list[str]:
    """Names of the callbacks of lit_gpu (and tests) on the trainer, in order."""
    return [
        type(cb).__name__
        for cb in cli.trainer.callbacks
        if type(cb).__module__.startswith(("lit_gpu", "tests"))
    ]


def test_print_config_lists_every_callback_lit_gpu_adds(tmp_path, monkeypatch, capsys):
    """Each callback lit_gpu puts on the trainer is a guarantee (lit_gpu.callbacks.GUARANTEES, always on, as
    Lightning's own progress bar and checkpoint are, so not config) or in --print_config, as a
    trainer.callbacks entry or as its own group (checkpoint, nan_guard, speed), except the progress bar
    (trainer.enable_progress_bar)."""
    monkeypatch.chdir(tmp_path)
    printed = yaml.safe_load(print_config(["--config", str(CONFIGS / "simple.yaml")], capsys))
    listed = [entry["class_path"].rsplit(".", 1)[-1] for entry in printed["trainer"]["callbacks"]]
    assert listed == [cls.__name__ for cls in STEP_PATH_CALLBACKS]
    assert listed == ["SkipIdleHooks", "LeanOptimizerStep", "LeanTrainingBatch"]
    guarantees = [cls.__name__ for cls in GUARANTEES]
    assert guarantees == [
        "RunFolderSync",
        "RNGStateCallback",
        "LoggingStateCallback",
        "CheckpointOnInterrupt",
        "OOMLoopName",
    ]
    groups = {"FreshLastCheckpoint": "checkpoint", "NaNGuard": "nan_guard", "SpeedLevers": "speed"}
    assert set(groups.values()) <= set(printed)
    cli = LitGpuCLI(args=["--config", str(CONFIGS / "simple.yaml")], run=False)
    # not behaviour to switch: the bar or its log-file lines (trainer.enable_progress_bar,
    # --progress_interval), LightningCLI's config saver, the model spec recorded in checkpoints, and
    # Lightning's own model summary (its class switched to drop an all-zero FLOPs column)
    plumbing = {"LitProgressBar", "ProgressLog", "RunConfigSaver", "RecordModelSpec"}
    on_trainer = [n for n in _lit_gpu_callbacks(cli) if n not in plumbing]
    assert sorted(on_trainer) == sorted(guarantees + listed + list(groups))
    assert on_trainer[: len(DEFAULT_CALLBACKS)] == [cls.__name__ for cls in DEFAULT_CALLBACKS]  # the order


def test_a_configs_own_list_removes_the_step_path_defaults_and_keeps_the_guarantees(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    guarantees = [cls.__name__ for cls in GUARANTEES]
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  callbacks:\n  - class_path: lit_gpu.callbacks.SkipIdleHooks\n")
    cli = LitGpuCLI(args=[*SIMPLE_DEBUG, "--config", str(mine)], run=False)
    assert "LeanOptimizerStep" not in _lit_gpu_callbacks(cli)
    assert _lit_gpu_callbacks(cli)[: len(guarantees) + 1] == [*guarantees, "SkipIdleHooks"]
    mine.write_text("trainer:\n  callbacks: []\n")  # none of the defaults
    cli = LitGpuCLI(args=[*SIMPLE_DEBUG, "--config", str(mine)], run=False)
    assert not {cls.__name__ for cls in STEP_PATH_CALLBACKS} & set(_lit_gpu_callbacks(cli))
    assert _lit_gpu_callbacks(cli)[: len(guarantees)] == guarantees


def test_the_switch_off_leaves_only_what_the_config_lists(tmp_path, monkeypatch):
    """``LIT_GPU_GUARANTEES=false``: no guarantee lit_gpu adds; one the config lists is the config's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SWITCH, "false")
    cli = LitGpuCLI(args=SIMPLE_DEBUG, run=False)
    assert not {cls.__name__ for cls in GUARANTEES} & set(_lit_gpu_callbacks(cli))
    assert _lit_gpu_callbacks(cli)[: len(STEP_PATH_CALLBACKS)] == [c.__name__ for c in STEP_PATH_CALLBACKS]
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  callbacks:\n  - class_path: lit_gpu.callbacks.CheckpointOnInterrupt\n")
    cli = LitGpuCLI(args=[*SIMPLE_DEBUG, "--config", str(mine)], run=False)
    assert [n for n in _lit_gpu_callbacks(cli) if n in {c.__name__ for c in GUARANTEES}] == [
        "CheckpointOnInterrupt"
    ]


def test_a_bad_value_of_the_switch_is_one_line_and_leaves_no_run_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SWITCH, "off")
    with pytest.raises(SystemExit) as info:
        main(["fit", *SIMPLE_DEBUG])
    err = capsys.readouterr().err
    assert info.value.code == 2, err[-2000:]
    (line,) = err.strip().splitlines()
    assert line.startswith(f"lit-gpu: error: {SWITCH}='off' is neither true nor false; "), line
    assert not list((tmp_path / "runs").rglob("version_*"))


def test_appending_keeps_the_defaults(tmp_path, monkeypatch):
    """``callbacks+:`` in YAML and ``--trainer.callbacks+=`` append; null (older configs): the defaults.

    ``OOMRecovery`` is an ``OOMLoopName``: the user's instance takes the guarantee's place."""
    monkeypatch.chdir(tmp_path)
    defaults = [cls.__name__ for cls in DEFAULT_CALLBACKS]
    flag = LitGpuCLI(args=[*SIMPLE_DEBUG, "--trainer.callbacks+=lit_gpu.callbacks.OOMRecovery"], run=False)
    n = len(defaults)
    appended = [name for name in defaults if name != "OOMLoopName"] + ["OOMRecovery"]
    assert _lit_gpu_callbacks(flag)[:n] == appended
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  callbacks+:\n  - class_path: lit_gpu.callbacks.OOMRecovery\n")
    yaml_append = LitGpuCLI(args=[*SIMPLE_DEBUG, "--config", str(mine)], run=False)
    assert _lit_gpu_callbacks(yaml_append)[:n] == appended
    mine.write_text("trainer:\n  callbacks: null\n")
    old = LitGpuCLI(args=[*SIMPLE_DEBUG, "--config", str(mine)], run=False)
    assert _lit_gpu_callbacks(old)[: len(defaults)] == defaults


@pytest.mark.integration  # trains for seconds: not the inner loop (--fast)
def test_oom_recovery_flag_adds_its_callback_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    both = ["--oom_recovery", "true", "--trainer.callbacks+=lit_gpu.callbacks.OOMRecovery"]
    for extra in (["--oom_recovery", "true"], both):
        cli = LitGpuCLI(args=["fit", *SIMPLE_DEBUG, *extra, "--trainer.max_steps", "1"])
        assert _lit_gpu_callbacks(cli).count("OOMRecovery") == 1


@pytest.mark.integration  # trains for seconds: not the inner loop (--fast)
def test_print_config_then_fit_from_it_behaves_the_same(tmp_path, monkeypatch, capsys):
    """The round trip LightningCLI promises: a fit from the printed config equals the fit from flags."""
    monkeypatch.chdir(tmp_path)
    args = [*SIMPLE_DEBUG, "--trainer.max_epochs", "1", "--trainer.callbacks+=lit_gpu.callbacks.OOMRecovery"]
    printed = tmp_path / "printed.yaml"
    printed.write_text(print_config(args, capsys))
    direct = LitGpuCLI(args=["fit", *args])
    again = LitGpuCLI(args=["fit", "--config", str(printed)])
    assert _lit_gpu_callbacks(again) == _lit_gpu_callbacks(direct)
    assert again.trainer.global_step == direct.trainer.global_step > 0
    want = direct.model.state_dict()
    assert again.model.state_dict().keys() == want.keys()
    for name, got in again.model.state_dict().items():
        assert torch.equal(got, want[name]), name
