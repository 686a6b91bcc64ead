"""Lightning's ``examples/pytorch/domain_templates/imagenet.py`` with LitGpuCLI and tiny offline data.

Kept: ``LightningCLI(ImageNetLightningModel, trainer_defaults={...}, seed_everything_default=42,
save_config_kwargs={"overwrite": True})`` with its progress bar and ModelCheckpoint in ``trainer_defaults``,
``logger: False``, SGD + LambdaLR, a ``setup`` that builds the datasets, top-1 accuracy logged.
Replaced: the ImageFolder data (seeded random images) and the torchvision ResNet (one conv and a linear).
"""

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from torch import nn, optim
from torch.optim import lr_scheduler
from torch.utils.data import Dataset, TensorDataset

from lit_gpu.cli import LitGpuCLI


def _images(n: int, seed: int) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 4, (n,), generator=g))


class ImageNetLightningModel(LightningModule):
    def __init__(
        self,
        data_path: str,
        arch: str = "tiny",
        lr: float = 0.1,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        batch_size: int = 8,
        workers: int = 0,
    ):
        super().__init__()
        self.arch, self.lr, self.momentum, self.weight_decay = arch, lr, momentum, weight_decay
        self.data_path, self.batch_size, self.workers = data_path, batch_size, workers
        self.model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 4))
        self.train_dataset = self.eval_dataset = None

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        images, target = batch
        loss_train = F.cross_entropy(self.model(images), target)
        self.log("train_loss", loss_train)
        return loss_train

    def eval_step(self, batch, batch_idx, prefix: str):
        images, target = batch
        output = self.model(images)
        self.log(f"{prefix}_loss", F.cross_entropy(output, target))
        self.log(f"{prefix}_acc1", (output.argmax(1) == target).float().mean(), prog_bar=True)

    def validation_step(self, batch, batch_idx):
        return self.eval_step(batch, batch_idx, "val")

    def test_step(self, batch, batch_idx):
        return self.eval_step(batch, batch_idx, "test")

    def configure_optimizers(self):
        optimizer = optim.SGD(
            self.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
        )
        scheduler = lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.1 ** (epoch // 30))
        return [optimizer], [scheduler]

    def setup(self, stage: str):
        if stage == "fit":
            self.train_dataset = _images(64, seed=0)
        self.eval_dataset = _images(16, seed=1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.train_dataset, batch_size=self.batch_size, shuffle=True,
                                           num_workers=self.workers)  # fmt: skip

    def val_dataloader(self):
        return torch.utils.data.DataLoader(
            self.eval_dataset, batch_size=self.batch_size, num_workers=self.workers
        )

    def test_dataloader(self):
        return self.val_dataloader()


if __name__ == "__main__":
    LitGpuCLI(
        ImageNetLightningModel,
        trainer_defaults={
            "max_epochs": 90,
            "accelerator": "auto",
            "devices": 1,
            "logger": False,
            "benchmark": True,
            "callbacks": [
                # the PyTorch example refreshes every 10 batches
                TQDMProgressBar(refresh_rate=10),
                # save when the validation top1 accuracy improves
                ModelCheckpoint(monitor="val_acc1", mode="max"),
            ],
        },
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
    )
