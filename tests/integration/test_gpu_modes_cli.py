"""GPU modes through the real CLI on a CPU machine: dp config, free:N / precision auto, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import yaml

from lit_gpu import devices
from lit_gpu.cli import LitGpuCLI, main
from tests.helpers.fake_nvml import FakeGpu, install
from tests.helpers.forked_cli import run_cli
from tests.helpers.paths import CONFIGS, REPO_ROOT
from tests.helpers.run_if import RunIf

SIMPLE = ["--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]
no_cuda = RunIf(max_cuda_gpus=0)  # checks the no-GPU behaviour


def _one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("lit-gpu: error:")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr
    return errors[0]


def test_foonet_dp_fit_runs_as_single_device_on_cpu(tmp_path, cli_env):
    args = [
        "fit",
        "--config", str(CONFIGS / "foonet.yaml"), "--config", str(CONFIGS / "trainer/dp.yaml"),
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "8", "--trainer.limit_val_batches", "2",
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    proc = run_cli(args, tmp_path, cli_env, timeout=300)  # forked: tests/helpers/forked_cli.py
    assert proc.returncode == 0, proc.stderr
    assert "DataParallel" not in proc.stderr and "strategy 'dp'" not in proc.stderr  # no per-run warning
    run = sorted((tmp_path / "runs" / "lit_gpu").glob("version_*"))[-1]
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["strategy"] == "dp"
    state = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    assert state and all(k.startswith("net.linears.") for k in state)


@no_cuda
def test_gpu_yaml_without_gpu_is_one_line_subprocess(tmp_path, cli_env):
    # a process of its own (exit status, stderr), forked: the console script's start is test_cli_end_to_end's
    proc = run_cli(["fit", *SIMPLE, "--config", str(CONFIGS / "trainer/gpu.yaml")], REPO_ROOT, cli_env, 300)
    assert proc.returncode == 2
    line = _one_error_line(proc.stderr)
    assert "configs/trainer/gpu.yaml (trainer.accelerator: gpu)" in line
    assert "--config lit_gpu:trainer/cpu " in line and "--trainer.accelerator cpu" in line


@no_cuda
def test_accelerator_flag_without_gpu_names_the_flag(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", *SIMPLE, "--trainer.accelerator", "gpu"])
    assert info.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--trainer.accelerator gpu asks for a GPU" in line and "lit_gpu:trainer/cpu" in line


def test_devices_above_present_is_one_line(monkeypatch, capsys):
    # pretend CUDA has one GPU (Lightning's own device parser does the checking)
    import lightning.fabric.accelerators.cuda as fabric_cuda

    monkeypatch.setattr(fabric_cuda, "num_cuda_devices", lambda: 1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit) as info:
        main(["fit", *SIMPLE, "--trainer.accelerator", "cuda", "--trainer.devices", "4"])
    assert info.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--trainer.devices 4 asks for GPUs [0, 1, 2, 3], but only 1 is visible [0]" in line
    assert "--trainer.devices 1" in line and "lit_gpu:trainer/cpu" in line


def test_dp_on_several_cpus_is_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", *SIMPLE, "--trainer.strategy", "dp", "--trainer.devices", "2"])
    assert info.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "strategy 'dp'" in line and "strategy: ddp" in line


def test_free_n_without_driver_is_one_line(monkeypatch, capsys):
    install(monkeypatch, [], fail_init=True)
    with pytest.raises(SystemExit) as info:
        main(["fit", *SIMPLE, "--trainer.accelerator", "gpu", "--trainer.devices", "free:2"])
    assert info.value.code == 2
    assert "devices 'free:2' needs NVIDIA's driver" in _one_error_line(capsys.readouterr().err)


def _parsed_trainer(monkeypatch, extra: list[str]):
    """Run the CLI up to (not including) instantiation; return the resolved trainer config."""
    monkeypatch.setattr("sys.argv", ["lit-gpu"])
    monkeypatch.setattr(LitGpuCLI, "instantiate_classes", lambda self: None)
    cli = LitGpuCLI(args=[*SIMPLE, *extra], run=False)
    return cli.config.trainer


def test_cli_resolves_free_n_and_precision_auto_on_faked_gpus(monkeypatch):
    install(monkeypatch, [FakeGpu(free_gib=2, capability=(7, 5)), FakeGpu(free_gib=9, capability=(9, 0))])
    monkeypatch.setattr(devices, "_cuda_available", lambda: True)
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: False)  # a fresh `lit-gpu` process
    trainer = _parsed_trainer(
        monkeypatch,
        ["--trainer.accelerator", "gpu", "--trainer.devices", "free:1", "--trainer.precision", "auto"],
    )
    assert trainer.devices == [0]  # cuda:0 of CUDA_VISIBLE_DEVICES = physical GPU 1, handed down
    assert trainer.precision == "bf16-mixed"


def test_cli_saves_and_logs_which_physical_gpus_free_n_chose(monkeypatch, capsys, tmp_path):
    fake = install(monkeypatch, [FakeGpu(free_gib=20), FakeGpu(free_gib=9), FakeGpu(free_gib=60)])
    monkeypatch.setattr(devices, "_cuda_initialized", lambda: False)  # a fresh `lit-gpu` process
    monkeypatch.setattr("sys.argv", ["lit-gpu"])
    monkeypatch.setattr(LitGpuCLI, "instantiate_classes", lambda self: None)
    args = [*SIMPLE, "--trainer.accelerator", "gpu", "--trainer.strategy", "ddp"]
    args += ["--trainer.devices", "free:2"]
    cli = LitGpuCLI(args=args, run=False)
    assert cli.config.trainer.devices == [0, 1]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == f"{fake.gpus[2].uuid},{fake.gpus[0].uuid}"
    err = capsys.readouterr().err
    log = [line for line in err.splitlines() if "free:2 chose" in line]
    assert len(log) == 1 and f"local rank 0 -> GPU 2 {fake.gpus[2].name} ({fake.gpus[2].uuid})" in log[0]
    saved = tmp_path / "config.yaml"
    cli.parser.save(cli.config, str(saved))  # what SaveConfigCallback writes
    record = yaml.safe_load(saved.read_text())["free_gpus"]
    assert [(r["local_rank"], r["index"], r["uuid"]) for r in record] == [
        (0, 2, fake.gpus[2].uuid),
        (1, 0, fake.gpus[0].uuid),
    ]
    # the saved config loads again; the record describes this run only, so it is rewritten
    again = LitGpuCLI(args=["--config", str(saved), "--trainer.devices", "1"], run=False)
    assert again.config.free_gpus is None and str(again.config.trainer.devices) == "1"


def test_cli_precision_auto_on_cpu_fits(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["lit-gpu"])
    cli = LitGpuCLI(args=["fit", *SIMPLE, "--trainer.precision", "auto", "--trainer.max_epochs", "1"])
    assert cli.trainer.precision == devices.cpu_precision()
    assert "train/loss_epoch" in cli.trainer.callback_metrics


def test_env_json_into_a_closed_pipe_has_no_traceback(tmp_path, cli_env):
    """`lit-gpu env --json | head -c1`: the reader is gone before lit-gpu writes; no traceback."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lit_gpu", "env", "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env=cli_env,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
