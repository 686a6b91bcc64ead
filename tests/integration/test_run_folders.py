"""Issue 11 through the real CLI: runs live under --trainer.default_root_dir, one folder per run.

1. default_root_dir decides where everything goes; 2. CSV + TensorBoard in the same version folder;
3. --ckpt_path last/best pick a run of the same model; 4. a checkpoint alone rebuilds its run;
5. concurrent runs get distinct folders, a failed start leaves none; 6. a foreign LightningModule.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from lit_gpu.cli import LitGpuCLI, main
from lit_gpu.commands.plot import main as plot_main
from tests.helpers.forked_cli import popen, run_cli
from tests.helpers.paths import CONFIGS

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
FOONET = ["--config", str(CONFIGS / "foonet.yaml"), "--config", str(CONFIGS / "debug.yaml")]
BORING = "lightning.pytorch.demos.boring_classes"
BORING_ARGS = ["--model", f"{BORING}.BoringModel", "--data", f"{BORING}.BoringDataModule"]
BORING_ARGS += ["--config", str(CONFIGS / "debug.yaml")]


def _versions(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.glob("version_*"))


def _exit_code(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(args)
    return info.value.code


# ---- 1 + 2: one root, one folder, CSV and TensorBoard side by side -----------------------------
def test_default_root_dir_holds_config_logs_and_checkpoints(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cli = LitGpuCLI(args=["fit", *SIMPLE, "--trainer.default_root_dir", "exp1"])
    run = tmp_path / "exp1" / "lit_gpu" / "version_0"
    names = {p.name for p in run.iterdir()}
    assert {"config.yaml", "metrics.csv", "hparams.yaml", "checkpoints"} <= names
    assert any(n.startswith("events.out.tfevents.") for n in names)  # TensorBoard beside the CSV
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert [type(lg).__name__ for lg in cli.trainer.loggers] == ["RunTensorBoardLogger", "RunCSVLogger"]
    assert cli.trainer.log_dir == str(Path("exp1") / "lit_gpu" / "version_0")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "lightning_logs").exists()
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["trainer"]["default_root_dir"] == "exp1" and saved["loggers"] == ["csv", "tensorboard"]
    # lit-gpu plot follows the same root: the root alone finds its newest run
    assert plot_main(["exp1"]) == 0 and (run / "curves.png").is_file()


@pytest.mark.parametrize(
    ("fragment", "csv", "events"), [("csv.yaml", True, False), ("tensorboard.yaml", False, True)]
)
def test_logger_fragments_pick_one_logger(fragment, csv, events, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [*SIMPLE, "--config", str(CONFIGS / "logger" / fragment), "--trainer.max_epochs", "1"]
    LitGpuCLI(args=["fit", *args])
    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    assert (run / "metrics.csv").is_file() is csv
    assert any(run.glob("events.out.tfevents.*")) is events
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()


# ---- 3: last/best pick a run of the same model ----------------------------------------------------
def test_ckpt_path_last_and_best_pick_the_newest_run_of_the_same_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(args=["fit", *FOONET, "--trainer.max_epochs", "1"])  # version_0: FooNet
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "1"])  # version_1: SimpleModel, newer
    capsys.readouterr()
    test = LitGpuCLI(args=["test", *FOONET, "--ckpt_path", "last", "--trainer.logger", "false"])
    picked = Path(test.config["test"]["ckpt_path"])
    assert picked.parts[-3:] == ("version_0", "checkpoints", "last.ckpt")
    err = capsys.readouterr().err
    assert "run version_0, the newest of yours with RegressionModule(FooNet)" in err
    assert "passed over newer version_1: another model (RegressionModule(SimpleModel)" in err
    best = LitGpuCLI(args=["test", *SIMPLE, "--ckpt_path", "best", "--trainer.logger", "false"])
    assert Path(best.config["test"]["ckpt_path"]).parent.parent.name == "version_1"
    assert Path(best.config["test"]["ckpt_path"]).name.startswith("best-")


def test_ckpt_path_last_without_a_matching_run_lists_what_is_there(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "1"])
    capsys.readouterr()
    assert _exit_code(["test", *FOONET, "--ckpt_path", "last"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("lit-gpu: error: --ckpt_path last: no run of")
    assert "RegressionModule(FooNet)" in err and "there: version_0 (RegressionModule(SimpleModel)" in err
    assert _versions(tmp_path / "runs" / "lit_gpu") == ["version_0"]  # the refused run claimed nothing


# ---- 4: a checkpoint alone rebuilds its run ---------------------------------------------------------
def test_checkpoint_alone_rebuilds_the_run_and_flags_override(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    LitGpuCLI(args=["fit", *FOONET, "--trainer.default_root_dir", str(tmp_path / "exp1")])
    ckpt = tmp_path / "exp1" / "lit_gpu" / "version_0" / "checkpoints" / "last.ckpt"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the root comes from the checkpoint's place, not the working dir
    capsys.readouterr()
    # model and data come from the run's config.yaml, trainer settings only from the command line
    limits = ["--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]
    fit = LitGpuCLI(args=["fit", "--ckpt_path", str(ckpt), "--trainer.max_epochs", "3", *limits])
    assert "rebuilding the run from" in capsys.readouterr().err
    assert type(fit.model.net).__name__ == "FooNet" and fit.trainer.max_epochs == 3
    assert fit.trainer.global_step == 12  # 2 epochs resumed + 1 more, 4 batches each
    assert _versions(tmp_path / "exp1" / "lit_gpu") == ["version_0"]  # the resumed fit continued its run
    assert not any(elsewhere.iterdir())
    for sub in ("test", "validate"):
        cli = LitGpuCLI(args=[sub, "--ckpt_path", str(ckpt), "--trainer.logger", "false", *limits])
        assert any(k.startswith(("test/", "val/")) for k in cli.trainer.callback_metrics)
    LitGpuCLI(args=["predict", "--ckpt_path", str(ckpt), "--predict_out", "p.csv", "--loggers", "[]"])
    assert len((elsewhere / "p.csv").read_text().splitlines()) > 1


# ---- 5: concurrent runs, DDP, failed starts ---------------------------------------------------------
def test_two_processes_started_together_get_two_folders(tmp_path, cli_env):
    cmd = ["fit", *SIMPLE, "--trainer.max_epochs", "1"]
    cmd += ["--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1", "--loggers", "[csv]"]
    procs = [  # three at once (was: three rounds of two; the same race, half the start-ups), forked
        popen(cmd, tmp_path, cli_env, stderr=subprocess.STDOUT) for _ in range(3)
    ]
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    parent = tmp_path / "runs" / "lit_gpu"
    assert _versions(parent) == [f"version_{i}" for i in range(3)]
    for run in parent.iterdir():  # each run wrote its own config, metrics and checkpoint
        assert (run / "config.yaml").is_file() and (run / "metrics.csv").is_file()
        assert (run / "checkpoints" / "last.ckpt").is_file()


def test_failed_start_leaves_no_version_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # the net takes 12 features, the data gives 10: the first forward fails after the run started
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        LitGpuCLI(args=["fit", *SIMPLE, "--model.net.init_args.in_features", "12"])
    assert _versions(tmp_path / "runs" / "lit_gpu") == []


# ---- 6: a LightningModule no one here wrote ---------------------------------------------------------
def test_foreign_module_fit_test_predict_keeps_last_only(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fit = LitGpuCLI(args=["fit", *BORING_ARGS])
    err = capsys.readouterr().err
    assert "BoringModel does not log 'val/loss'" in err and "keeping last.ckpt only" in err
    run = tmp_path / "runs" / "lit_gpu" / "version_0"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt"]
    assert fit.trainer.checkpoint_callback.monitor is None
    ckpt = run / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True, map_location="cpu")
    assert state["global_step"] == 8
    LitGpuCLI(args=["test", "--ckpt_path", str(ckpt)])  # rebuilt from the saved config
    LitGpuCLI(args=["predict", "--ckpt_path", str(ckpt), "--predict_out", "boring.csv"])
    assert (tmp_path / "boring.csv").read_text().startswith("index,output_0,output_1")
    # dp on one device is single-device training, also for a module without a `net`
    dp = LitGpuCLI(args=["fit", *BORING_ARGS, "--trainer.strategy", "dp", "--trainer.max_epochs", "1"])
    assert type(dp.trainer.strategy).__name__ == "DataParallelStrategy" and dp.trainer.global_step == 4


def test_module_that_logs_val_loss_keeps_best_by_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fit = LitGpuCLI(args=["fit", *SIMPLE])
    assert fit.trainer.checkpoint_callback.monitor == "val/loss"
    assert len(list((tmp_path / "runs/lit_gpu/version_0/checkpoints").glob("best-*.ckpt"))) == 1


def test_foreign_module_under_ddp_on_cpu_writes_into_one_folder(tmp_path, cli_env):
    cmd = ["fit", *BORING_ARGS, "--trainer.strategy", "ddp"]
    cmd += ["--trainer.devices", "2", "--trainer.default_root_dir", "exp"]
    out = run_cli(cmd, tmp_path, cli_env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("keeping last.ckpt only") == 1  # said once, by rank 0
    parent = tmp_path / "exp" / "lit_gpu"
    assert _versions(parent) == ["version_0"]
    assert (parent / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


# ---- 7: a root several users write ---------------------------------------------------------------
def test_a_shared_root_with_odd_names_and_another_users_runs(tmp_path, monkeypatch, capsys):
    """Planted names never stop a fit; another user's newer run is passed over by last and best, never
    taken over, continued or written; the resolution line says why."""
    import os

    monkeypatch.chdir(tmp_path)
    parent = tmp_path / "runs" / "lit_gpu"
    for name in ("version_" + "9" * 40, "version_abc", "version_01"):
        (parent / name).mkdir(parents=True)
    (parent / "version_0").write_text("")  # an empty file where a run would be
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "1"])
    mine = parent / "version_1"
    assert (mine / "checkpoints" / "last.ckpt").is_file() and (parent / "version_0").read_text() == ""
    if os.geteuid() != 0:
        return  # giving a folder to another user needs root
    theirs = parent / "version_2"
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "2", "--new_run", "true"])
    (theirs / ".lit_gpu.lock").write_text("")  # and an abandoned start of theirs, version_3
    (parent / "version_3").mkdir()
    (parent / "version_3" / ".lit_gpu.lock").write_text("")
    for path in [theirs, parent / "version_3", *theirs.rglob("*"), *(parent / "version_3").rglob("*")]:
        os.chown(path, 65534, 65534)
    before = {p: p.stat().st_mtime_ns for p in [*theirs.rglob("*"), *(parent / "version_3").rglob("*")]}
    capsys.readouterr()
    for which in ("last", "best"):
        test = LitGpuCLI(args=["test", *SIMPLE, "--ckpt_path", which])
        assert Path(test.config["test"]["ckpt_path"]).parent.parent.absolute() == mine
    err = capsys.readouterr().err
    assert err.count("passed over newer version_3: owned by") == 2 and "version_2: owned by" in err
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "2", "--ckpt_path", "last"])  # continues mine
    LitGpuCLI(args=["fit", *SIMPLE, "--trainer.max_epochs", "1"])  # a new run: no take-over of theirs
    assert (parent / "version_4" / "checkpoints" / "last.ckpt").is_file()
    assert not (parent / "version_5").exists()
    assert sorted(p.name for p in (mine / "evaluations").iterdir()) == ["test_0", "test_1"]
    now = {p: p.stat().st_mtime_ns for p in [*theirs.rglob("*"), *(parent / "version_3").rglob("*")]}
    assert now == before  # nothing written, created or removed in another user's folders
