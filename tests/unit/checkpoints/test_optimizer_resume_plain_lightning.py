"""Checkpoints plain Lightning 2.x writes (``Trainer.save_checkpoint``) resume through lit_gpu's optimizer
and scheduler checks, with and without ``--fresh_optimizer`` (red team wt-rt2, the legitimate corpus): two
optimizers (a GAN), manual optimization, ``configure_optimizers`` dicts with ``interval``/``frequency`` and
``monitor``, named param groups, numpy learning rates, fused/foreach Adam, LBFGS, a module's bound-method
schedule, SequentialLR and ChainedScheduler. A forged setting in such a file is one line."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import override

from lit_gpu.checkpoints.contracts import ContractError
from lit_gpu.checkpoints.io import install_atomic_checkpoint_io

pytestmark = pytest.mark.integration  # trains for a second or two per case
S = torch.optim.lr_scheduler


def _data() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=8
    )


class Module(pl.LightningModule):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
        self.disc = torch.nn.Linear(1, 1)
        self.automatic_optimization = case not in ("gan", "manual")

    @override
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.case == "gan":
            gen, disc = self.optimizers()
            gen.zero_grad()
            self.manual_backward(loss)
            gen.step()
            disc.zero_grad()
            self.manual_backward(self.disc(self.net(x).detach()).pow(2).mean())
            disc.step()
            return None
        if self.case == "manual":
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
            self.lr_schedulers().step()
            return None
        return loss

    @override
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def schedule(self, step: int) -> float:
        return float(0.5 * (1 + np.cos(np.pi * min(step, 20) / 20)))

    @override
    def configure_optimizers(self):  # noqa: C901, PLR0911  # one branch per real-world layout
        case, params = self.case, [*self.net.parameters(), *self.disc.parameters()]
        if case == "gan":
            gen = torch.optim.Adam(self.net.parameters(), lr=np.float32(1e-3), betas=(0.5, 0.999))
            return [gen, torch.optim.Adam(self.disc.parameters(), lr=2e-4)], []
        if case == "manual":
            sgd = torch.optim.SGD(params, lr=0.01, momentum=0.9)
            return [sgd], [S.StepLR(sgd, 2)]
        if case == "plateau":
            adam = torch.optim.Adam(params, lr=1e-3)
            return {
                "optimizer": adam,
                "lr_scheduler": {"scheduler": S.ReduceLROnPlateau(adam), "monitor": "val_loss"},
            }
        if case == "named groups, OneCycleLR per step":
            groups = [
                {"params": self.net[0].parameters(), "name": "encoder"},
                {"params": [*self.net[1].parameters(), *self.disc.parameters()], "name": "head", "lr": 1e-4},
            ]
            adamw = torch.optim.AdamW(groups, lr=1e-3)
            one_cycle = S.OneCycleLR(adamw, max_lr=[1e-2, 1e-3], total_steps=40)
            return {
                "optimizer": adamw,
                "lr_scheduler": {"scheduler": one_cycle, "interval": "step", "frequency": 1},
            }
        if case == "frequency 2":
            rms = torch.optim.RMSprop(params, lr=1e-3)
            return {
                "optimizer": rms,
                "lr_scheduler": {"scheduler": S.CosineAnnealingLR(rms, 10), "frequency": 2},
            }
        if case == "bound-method LambdaLR":
            sgd = torch.optim.SGD(params, lr=0.1)
            return [sgd], [{"scheduler": S.LambdaLR(sgd, self.schedule), "interval": "step"}]
        if case in ("fused Adam", "foreach Adam"):
            return torch.optim.Adam(params, lr=1e-3, **{case.split()[0]: True})
        if case == "LBFGS":
            return torch.optim.LBFGS(params, lr=0.1)
        if case == "SequentialLR":
            sgd = torch.optim.SGD(params, lr=0.1, momentum=0.9)
            children = [S.LinearLR(sgd, 0.1, total_iters=3), S.ExponentialLR(sgd, 0.9)]
            return [sgd], [S.SequentialLR(sgd, children, milestones=[3])]
        adagrad = torch.optim.Adagrad(params, lr=0.1)
        return [adagrad], [S.ChainedScheduler([S.StepLR(adagrad, 2), S.ExponentialLR(adagrad, 0.95)])]


def _trainer(root: Path, epochs: int) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )


def _plain_checkpoint(case: str, root: Path) -> Path:
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    trainer = _trainer(root, 2)
    trainer.fit(Module(case), _data(), _data())
    trainer.save_checkpoint(root / "plain.ckpt")  # plain Lightning: no lit_gpu plugin
    return root / "plain.ckpt"


def _resume(case: str, path: Path, fresh: bool) -> pl.Trainer:
    trainer = _trainer(path.parent, 3)
    install_atomic_checkpoint_io(trainer)
    trainer.strategy.checkpoint_io.fresh_optimizer = fresh
    trainer.fit(Module(case), _data(), _data(), ckpt_path=path)
    return trainer


CASES = [
    "gan",
    "manual",
    "plateau",
    "named groups, OneCycleLR per step",
    "frequency 2",
    "bound-method LambdaLR",
    "fused Adam",
    "foreach Adam",
    "LBFGS",
    "SequentialLR",
    "ChainedScheduler",
]
SAMPLE = ["gan", "plateau", "named groups, OneCycleLR per step", "bound-method LambdaLR"]


def _resumes(case: str, root: Path) -> None:
    path = _plain_checkpoint(case, root)
    for fresh in (False, True):
        steps = 2 if case == "gan" else 1  # Lightning counts each optimizer's step
        assert _resume(case, path, fresh).global_step == 3 * 2 * steps


@pytest.mark.parametrize("case", SAMPLE)
def test_a_plain_lightning_checkpoint_resumes(case, tmp_path):
    _resumes(case, tmp_path)


@pytest.mark.full
@pytest.mark.parametrize("case", sorted(set(CASES) - set(SAMPLE)))
def test_a_plain_lightning_checkpoint_resumes_full(case, tmp_path):
    _resumes(case, tmp_path)


def test_a_forged_setting_in_a_plain_lightning_checkpoint_is_one_line(tmp_path):
    path = _plain_checkpoint("named groups, OneCycleLR per step", tmp_path)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["optimizer_states"][0]["param_groups"][0]["betas"] = "0.9, 1.5"
    torch.save(checkpoint, path)
    with pytest.raises(ContractError, match=r"param group 0\['betas'\] is a str, where the config builds"):
        _resume("named groups, OneCycleLR per step", path, fresh=False)
    assert _resume("named groups, OneCycleLR per step", path, fresh=True).global_step == 6


def test_a_weights_only_checkpoint_is_one_line_or_resumes_with_fresh_optimizers(tmp_path):
    """Before: ``ModelCheckpoint(save_weights_only=True)``'s file ended the fit in Lightning's KeyError
    ("checkpoint contains only the model"), with ``--fresh_optimizer`` too."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    trainer = _trainer(tmp_path, 2)
    trainer.fit(Module("plateau"), _data(), _data())
    trainer.save_checkpoint(tmp_path / "weights.ckpt", weights_only=True)
    with pytest.raises(ContractError, match=r"no optimizer or scheduler state .* add --fresh_optimizer true"):
        _resume("plateau", tmp_path / "weights.ckpt", fresh=False)
    assert _resume("plateau", tmp_path / "weights.ckpt", fresh=True).global_step == 6
