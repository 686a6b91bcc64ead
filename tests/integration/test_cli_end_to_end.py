"""fit -> checkpoint -> test through the real CLI, in-process and as installed commands."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_gpu.cli import LitGpuCLI
from tests.helpers.forked_cli import run_cli
from tests.helpers.paths import CONFIGS

DEBUG = ["--config", str(CONFIGS / "debug.yaml")]


def _run_dir(root: Path) -> Path:
    runs = sorted((root / "runs" / "lit_gpu").glob("version_*"))
    assert runs, f"no run under {root}"
    return runs[-1]


def _fit_then_test(args: list[str], tmp_path: Path, monkeypatch) -> dict:
    monkeypatch.chdir(tmp_path)
    fit = LitGpuCLI(args=["fit", *args])
    run = _run_dir(tmp_path)
    ckpts = run / "checkpoints"
    best = [p for p in ckpts.glob("best-*.ckpt")]
    assert (ckpts / "last.ckpt").is_file() and len(best) == 1
    assert (run / "config.yaml").is_file() and (run / "metrics.csv").is_file()
    assert Path(fit.trainer.checkpoint_callback.best_model_path).resolve() == best[0].resolve()
    state = torch.load(best[0], map_location="cpu", weights_only=True)["state_dict"]
    assert all(k.startswith("net.") for k in state if not k.startswith(("train_acc", "val_acc", "test_acc")))
    # "best" = the newest run's best-*.ckpt on disk (Lightning alone knows it only inside fit)
    test = LitGpuCLI(args=["test", *args, "--ckpt_path", "best", "--trainer.logger", "false"])
    assert Path(test.config["test"]["ckpt_path"]).resolve() == best[0].resolve()
    metrics = {k: v.item() for k, v in test.trainer.callback_metrics.items()}
    assert "test/loss" in metrics
    return metrics


def test_simple_fit_checkpoint_test(tmp_path, monkeypatch):
    metrics = _fit_then_test(["--config", str(CONFIGS / "simple.yaml"), *DEBUG], tmp_path, monkeypatch)
    assert metrics["test/loss"] < 2.0


def test_foonet_fit_checkpoint_test(tmp_path, monkeypatch):
    _fit_then_test(["--config", str(CONFIGS / "foonet.yaml"), *DEBUG], tmp_path, monkeypatch)


def test_mnist_tiny_fit_checkpoint_test(tmp_path, monkeypatch, fake_mnist_dir):
    args = [
        "--config",
        str(CONFIGS / "mnist.yaml"),
        *DEBUG,
        "--data.data_dir",
        str(fake_mnist_dir),
        "--data.download",
        "false",
        "--data.val_size",
        "100",
        "--data.num_workers",
        "0",
        "--data.batch_size",
        "50",
        "--model.net.init_args.channels",
        "8",
        "--trainer.max_epochs",
        "3",
        "--trainer.limit_train_batches",
        "10",
        "--trainer.limit_val_batches",
        "2",
        "--trainer.limit_test_batches",
        "4",
    ]
    metrics = _fit_then_test(args, tmp_path, monkeypatch)
    assert metrics["test/acc"] > 0.5  # fake digits are easy; chance is 0.1


@pytest.mark.parametrize("launcher", ["console-script", pytest.param("python-m", marks=pytest.mark.full)])
def test_installed_entry_points(launcher, tmp_path, cli_env):
    exe = (
        [str(Path(sys.executable).parent / "lit-gpu")]
        if launcher == "console-script"
        else [sys.executable, "-m", "lit_gpu"]
    )
    proc = subprocess.run(
        [*exe, "fit", "--config", str(CONFIGS / "simple.yaml"), *DEBUG],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (_run_dir(tmp_path) / "checkpoints" / "last.ckpt").is_file()
    assert "Tip" not in proc.stdout + proc.stderr


def test_missing_mnist_is_one_line_and_exit_2(tmp_path, cli_env):
    args = ["fit", "--config", str(CONFIGS / "mnist.yaml"), *DEBUG]
    args += ["--data.data_dir", str(tmp_path / "nowhere"), "--data.download", "false"]
    proc = run_cli(args, tmp_path, cli_env, timeout=300)  # forked: tests/helpers/forked_cli.py
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("lit-gpu: error:")]
    assert len(errors) == 1 and "MNIST/raw/" in errors[0] and "--data.download" in errors[0]


def test_model_and_data_fragments_compose(tmp_path, monkeypatch, fake_mnist_dir):
    """configs/model/*.yaml + configs/data/*.yaml + a trainer fragment make a full run."""
    monkeypatch.chdir(tmp_path)
    cli = LitGpuCLI(
        args=[
            "fit",
            "--config", str(CONFIGS / "model" / "mnist_cnn.yaml"),
            "--config", str(CONFIGS / "data" / "mnist.yaml"),
            "--config", str(CONFIGS / "trainer" / "cpu.yaml"),
            *DEBUG,
            "--data.data_dir", str(fake_mnist_dir), "--data.download", "false",
            "--data.val_size", "100", "--data.num_workers", "0", "--model.net.init_args.channels", "8",
        ]
    )  # fmt: skip
    assert type(cli.model.net).__name__ == "MnistCNN"
    assert cli.trainer.checkpoint_callback.monitor == "val/acc"
    assert {"val/acc", "val/loss", "train/loss"} <= set(cli.trainer.callback_metrics)
    monkeypatch.chdir(tmp_path / "runs")  # a second, regression run from model + data fragments
    cli = LitGpuCLI(
        args=[
            "fit",
            "--config", str(CONFIGS / "model" / "simple.yaml"),
            "--config", str(CONFIGS / "data" / "synthetic.yaml"),
            *DEBUG,
        ]
    )  # fmt: skip
    assert cli.trainer.callback_metrics["val/loss"] < 10
