"""configs/mnist_fast.yaml and mnist_fastest.yaml build and train on fake MNIST; the speed levers apply."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.cli import LitGpuCLI
from lit_gpu.nets import FastMnistNet
from lit_gpu.resume.loaders import TensorLoader
from tests.helpers.paths import CONFIGS


@pytest.mark.parametrize("recipe", ["mnist_fast.yaml", "mnist_fastest.yaml"])
def test_mnist_fast_config_trains_and_tests(recipe: str, fake_mnist_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = 24
    cli = LitGpuCLI(
        args=[
            "--config",
            str(CONFIGS / recipe),
            "--data.data_dir",
            str(fake_mnist_dir),
            "--data.val_size",
            "100",
            "--data.batch_size",
            "50",
            "--trainer.max_steps",
            str(steps),
            "--model.scheduler.init_args.total_steps",
            str(steps),
            "--trainer.max_epochs",
            "5",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.accelerator",
            "cpu",
        ],
        run=False,
    )
    assert isinstance(cli.model.net, FastMnistNet)
    assert cli.datamodule.storage == "tensor"
    levers = [cb for cb in cli.trainer.callbacks if isinstance(cb, SpeedLevers)]
    assert len(levers) == 1 and levers[0].channels_last
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == steps
    assert isinstance(cli.trainer.train_dataloader, TensorLoader)
    conv = cli.model.net.features[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert cli.trainer.lr_scheduler_configs[0].interval == "step"
    acc = cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)[0]["test/acc"]
    assert acc > 0.5  # learnable fake digits, 24 steps: far above the 10 % of chance


def test_fast_net_shapes():
    for k, params in ((3, None), (5, None)):
        net = FastMnistNet(8, 16, kernel_size=k)
        assert net(torch.randn(2, 1, 28, 28)).shape == (2, 10), params


def test_speed_levers_apply(monkeypatch):
    before = torch.get_float32_matmul_precision()
    threads = torch.get_num_threads()
    compiled: list[str | None] = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, mode=None: compiled.append(mode))
    levers = SpeedLevers(
        channels_last=True,
        compile=True,
        compile_mode="reduce-overhead",
        matmul_precision="high",
        num_threads=1,
    )
    module = pl.LightningModule()
    module.net = FastMnistNet(4, 8)
    try:
        levers.setup(None, module, "fit")  # type: ignore[arg-type]
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.get_num_threads() == 1
    finally:
        torch.set_float32_matmul_precision(before)
        torch.set_num_threads(threads)
    assert compiled == ["reduce-overhead"]
    assert module.net.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert "channels_last" in levers.describe() and "compile(reduce-overhead)" in levers.describe()
    with pytest.raises(ValueError, match="matmul_precision"):
        SpeedLevers(matmul_precision="tf32")


def test_mnist_gpu_recipe_parses_and_trains_two_steps_on_cpu(
    fake_mnist_dir: Path, tmp_path: Path, monkeypatch
):
    """configs/mnist_gpu.yaml (the H100 speed recipe): its levers are set; on a CPU it still trains."""
    monkeypatch.chdir(tmp_path)
    before = torch.get_float32_matmul_precision()
    cli = LitGpuCLI(
        args=["--config", str(CONFIGS / "mnist_gpu.yaml"), "--data.data_dir", str(fake_mnist_dir),
              "--data.val_size", "100", "--data.batch_size", "50", "--trainer.max_steps", "2",
              "--trainer.enable_progress_bar", "false", "--trainer.accelerator", "cpu",
              "--speed.compile", "false"],  # compiling takes minutes on a CPU; the GPU run compiles
        run=False,
    )  # fmt: skip
    try:
        assert cli.datamodule.storage == "gpu" and cli.datamodule.batch_size == 50  # 512 in the file
        levers = next(cb for cb in cli.trainer.callbacks if isinstance(cb, SpeedLevers))
        assert levers.compile_mode == "reduce-overhead" and levers.matmul_precision == "high"
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        optimizer = cli.trainer.optimizers[0]
        assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"] is True
        assert cli.trainer.global_step == 2
        assert isinstance(cli.trainer.train_dataloader, TensorLoader)  # storage gpu on a CPU: tensors
    finally:
        torch.set_float32_matmul_precision(before)


def test_mnist_gpu_recipe_schedule_matches_its_step_count():
    """total_steps of OneCycle = max_steps = 2 epochs x (55000 // batch_size): change them together."""
    import yaml

    config = yaml.safe_load((CONFIGS / "mnist_gpu.yaml").read_text())
    batch = config["data"]["init_args"]["batch_size"]
    steps = config["trainer"]["max_epochs"] * (55000 // batch)
    assert config["model"]["init_args"]["scheduler"]["init_args"]["total_steps"] == steps
    assert config["trainer"]["max_steps"] == steps
