"""What a callback's epoch-start hook set comes back after a resume (issue 65): Lightning's ``BaseFinetuning``
freezes the backbone in ``setup`` and unfreezes it at a milestone epoch in ``on_train_epoch_start``, which a
resume in the middle of an epoch does not run again (Lightning-AI/pytorch-lightning#21901), and which does
not unfreeze it again in the epochs after the milestone. The parameters that train, as saved, are restored; a
user's own ``on_train_epoch_start`` skipped by such a resume is named in one line."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BackboneFinetuning, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from lit_gpu.callbacks import RNGStateCallback


class Backboned(pl.LightningModule):
    """A backbone (with a batch norm) and a head; records how many backbone parameters train at each step."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 1)
        self.trainable: list[int] = []

    def training_step(self, batch, batch_idx):
        self.trainable.append(sum(p.requires_grad for p in self.backbone.parameters()))
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(1)
        return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), 4)

    def configure_optimizers(self):
        return torch.optim.Adam([p for p in self.parameters() if p.requires_grad], lr=0.01)


class EpochStartCounter(pl.Callback):
    """A user's callback with state set at each epoch's start."""

    def on_train_epoch_start(self, trainer, pl_module):
        pass


def _fit(root, ckpt=None, extra=()):
    module = Backboned()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[
            RNGStateCallback(),
            BackboneFinetuning(unfreeze_backbone_at_epoch=1),
            ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_top_k=-1, filename="{step}"),
            *extra,
        ],
    )
    trainer.fit(module, ckpt_path=ckpt)
    return module


def test_a_fine_tuned_backbone_trains_again_after_a_resume_inside_or_after_the_milestone(tmp_path, capsys):
    reference = _fit(tmp_path / "reference")
    assert reference.trainable == [2] * 4 + [4] * 8  # the batch norm trains; the linear from epoch 1 on
    for step in (6, 8, 10):  # inside the milestone epoch, at its end, in the epoch after
        resumed = _fit(tmp_path / f"from{step}", tmp_path / "reference" / "ckpt" / f"step={step}.ckpt")
        assert resumed.trainable == reference.trainable[step:], step
        for name, tensor in reference.state_dict().items():
            assert torch.equal(resumed.state_dict()[name], tensor), (step, name)
    assert "on_train_epoch_start" not in capsys.readouterr().err  # Lightning's own hook: restored, no line


def test_a_users_epoch_start_hook_skipped_by_a_mid_epoch_resume_is_named(tmp_path, capsys):
    _fit(tmp_path / "reference")
    capsys.readouterr()
    _fit(tmp_path / "mid", tmp_path / "reference" / "ckpt" / "step=6.ckpt", extra=[EpochStartCounter()])
    err = capsys.readouterr().err
    assert "Lightning does not run on_train_epoch_start again" in err and "EpochStartCounter" in err
    _fit(tmp_path / "end", tmp_path / "reference" / "ckpt" / "step=8.ckpt", extra=[EpochStartCounter()])
    assert "on_train_epoch_start" not in capsys.readouterr().err  # an epoch's end: the next one runs it
