"""configs/mnist_fast.yaml builds and trains on fake MNIST; the speed levers apply."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from lit_gpu.callbacks.speed import SpeedLevers
from lit_gpu.cli import LitGpuCLI
from lit_gpu.data.tensor_loader import TensorLoader
from lit_gpu.nets import FastMnistNet
from tests.helpers.paths import CONFIGS


def test_mnist_fast_config_trains_and_tests(fake_mnist_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = 24
    cli = LitGpuCLI(
        args=[
            "--config",
            str(CONFIGS / "mnist_fast.yaml"),
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
