"""Runs of a user's own script with ``LitGpuCLI(model_class=..., datamodule_class=...)`` (issue 64).

Such a CLI parses init args only (no ``class_path``); its runs record the classes (``classes.yaml``), so a
requeued ``fit --ckpt_path last`` continues the same ``version_N`` after a SIGTERM, ``validate``/``test
--ckpt_path last`` evaluate inside it, and ``lit-gpu export`` rebuilds the module, as for class-path
configs (its module trusted as theirs are).
The user's module is importable from the working folder only (as ``python train.py`` finds it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

from tests.helpers.robustness import HOLD_ENV

MODELS = """
import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class MyModel(pl.LightningModule):
    def __init__(self, hidden: int = 8, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
        )

    def forward(self, x):
        return self.net(x)

    def _loss(self, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self._loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test/loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class MyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 4):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
        self.data = TensorDataset(x, x.sum(1, keepdim=True))

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size)
"""
TRAIN = """
from lit_gpu.cli import LitGpuCLI
from mymodels import MyData, MyModel

if __name__ == "__main__":
    LitGpuCLI(model_class=MyModel, datamodule_class=MyData)
"""
FIT = [
    "fit",
    "--trainer.max_epochs", "2",
    "--trainer.callbacks+=tests.helpers.robustness.SlowSteps", "--trainer.callbacks.seconds", "0",
]  # fmt: skip
RUN = Path("runs") / "lit_gpu"


def _script(tmp_path: Path) -> None:
    (tmp_path / "mymodels.py").write_text(textwrap.dedent(MODELS))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=400
    )


def _stopped_at(step: int, cwd: Path, env: dict[str, str]) -> int:
    """``python train.py fit``, held at ``step`` by SlowSteps, stopped with SIGTERM; its exit code."""
    proc = subprocess.Popen(
        [sys.executable, "train.py", *FIT], cwd=cwd, env={**env, HOLD_ENV: str(step)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    progress = cwd / "progress.txt"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and int(progress.read_text() or 0) >= step:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    return proc.wait(timeout=240)


def test_a_model_class_script_continues_evaluates_and_exports_its_run(tmp_path, cli_env):
    _script(tmp_path)
    assert _stopped_at(3, tmp_path, cli_env) == 143
    run = tmp_path / RUN / "version_0"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert "MyModel" in (run / "classes.yaml").read_text()

    resumed = _run(["train.py", *FIT, "--ckpt_path", "last"], tmp_path, cli_env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = resumed.stdout + resumed.stderr
    assert "training from scratch" not in said and "continuing the run" in said, said[-3000:]
    assert sorted(p.name for p in (tmp_path / RUN).glob("version_*")) == ["version_0"]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 16

    for command in ("validate", "test"):
        done = _run(["train.py", command, "--ckpt_path", "last"], tmp_path, cli_env)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert (run / "evaluations" / f"{command}_0").is_dir()
    # the checkpoint alone: its run's init args under the script's own classes (no class read from a file)
    alone = _run(
        ["train.py", "test", "--ckpt_path", str(run / "checkpoints" / "last.ckpt")], tmp_path, cli_env
    )
    assert alone.returncode == 0, (alone.stdout + alone.stderr)[-3000:]
    assert "rebuilding the run from" in alone.stderr and (run / "evaluations" / "test_1").is_dir()

    export = ["-m", "lit_gpu", "export", str(run / "checkpoints" / "last.ckpt"), "--out", "model.pt"]
    trusted = ["--trust_module", "mymodels"]  # a user's module, trusted as for a class-path config's
    exported = _run([*export, *trusted], tmp_path, cli_env)
    assert exported.returncode == 0, (exported.stdout + exported.stderr)[-3000:]
    assert (tmp_path / "model.pt").is_file()
