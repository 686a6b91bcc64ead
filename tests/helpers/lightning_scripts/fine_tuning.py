"""Lightning's ``examples/pytorch/domain_templates/computer_vision_fine_tuning.py`` with LitGpuCLI and tiny
offline data.

Kept: ``MilestonesFinetuning`` (a ``BaseFinetuning`` callback that freezes the feature extractor and adds its
layers to the optimizer as a new param group at each milestone epoch), the data module's shape, the
model's Adam + MultiStepLR over the trainable parameters, and ``MyLightningCLI`` as written: its own
LightningCLI subclass adding the callback's arguments (``add_lightning_class_args``), three
``link_arguments`` and ``set_defaults``, built positionally: ``MyLightningCLI(TransferLearningModel,
CatDogImageDataModule, seed_everything_default=1234)``. Replaced: the download and ImageFolder (seeded
random images) and the pretrained ResNet-50 (a few small layers; the head's 2048 inputs are 16).
"""

import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks.finetuning import BaseFinetuning
from lightning.pytorch.utilities import rank_zero_info
from torch import nn, optim
from torch.optim.lr_scheduler import MultiStepLR
from torch.optim.optimizer import Optimizer
from torch.utils.data import DataLoader, TensorDataset

from lit_gpu.cli import LitGpuCLI

log = logging.getLogger(__name__)


class MilestonesFinetuning(BaseFinetuning):
    def __init__(self, milestones: tuple = (5, 10), train_bn: bool = False):
        super().__init__()
        self.milestones = milestones
        self.train_bn = train_bn

    def freeze_before_training(self, pl_module: LightningModule):
        self.freeze(modules=pl_module.feature_extractor, train_bn=self.train_bn)

    def finetune_function(self, pl_module: LightningModule, epoch: int, optimizer: Optimizer):
        if epoch == self.milestones[0]:
            # unfreeze 5 last layers
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor[-5:], optimizer=optimizer, train_bn=self.train_bn
            )
        elif epoch == self.milestones[1]:
            # unfreeze remaining layers
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor[:-5], optimizer=optimizer, train_bn=self.train_bn
            )


class CatDogImageDataModule(LightningDataModule):
    def __init__(self, dl_path: str | Path = "data", num_workers: int = 0, batch_size: int = 8):
        super().__init__()
        self._dl_path = dl_path
        self._num_workers = num_workers
        self._batch_size = batch_size

    def create_dataset(self, seed: int, n: int):
        g = torch.Generator().manual_seed(seed)
        return TensorDataset(torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 2, (n,), generator=g))

    def __dataloader(self, train: bool):
        """Train/validation loaders."""
        dataset = self.create_dataset(0, 64) if train else self.create_dataset(1, 16)
        return DataLoader(
            dataset=dataset, batch_size=self._batch_size, num_workers=self._num_workers, shuffle=train
        )

    def train_dataloader(self):
        log.info("Training data loaded.")
        return self.__dataloader(train=True)

    def val_dataloader(self):
        log.info("Validation data loaded.")
        return self.__dataloader(train=False)


class TransferLearningModel(LightningModule):
    def __init__(
        self,
        backbone: str = "tiny",
        train_bn: bool = False,
        milestones: tuple = (2, 4),
        batch_size: int = 32,
        lr: float = 1e-3,
        lr_scheduler_gamma: float = 1e-1,
        num_workers: int = 6,
        **kwargs,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.train_bn = train_bn
        self.milestones = milestones
        self.batch_size = batch_size
        self.lr = lr
        self.lr_scheduler_gamma = lr_scheduler_gamma
        self.num_workers = num_workers
        self.__build_model()
        self.save_hyperparameters()

    def __build_model(self):
        """Define model layers & loss (a small stand-in for ResNet-50's children, BatchNorm included)."""
        _layers = [nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16),
                   nn.ReLU(), nn.Conv2d(16, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1)]  # fmt: skip
        self.feature_extractor = nn.Sequential(*_layers)
        _fc_layers = [nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 32), nn.Linear(32, 1)]
        self.fc = nn.Sequential(*_fc_layers)
        self.loss_func = F.binary_cross_entropy_with_logits

    def forward(self, x):
        x = self.feature_extractor(x)
        x = x.squeeze(-1).squeeze(-1)
        return self.fc(x)

    def loss(self, logits, labels):
        return self.loss_func(input=logits, target=labels)

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_logits = self.forward(x)
        y_true = y.view((-1, 1)).type_as(x)
        train_loss = self.loss(y_logits, y_true)
        self.log("train_acc", ((y_logits > 0).int() == y_true.int()).float().mean(), prog_bar=True)
        return train_loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_logits = self.forward(x)
        y_true = y.view((-1, 1)).type_as(x)
        self.log("val_loss", self.loss(y_logits, y_true), prog_bar=True)
        self.log("val_acc", ((y_logits > 0).int() == y_true.int()).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        parameters = list(self.parameters())
        trainable_parameters = list(filter(lambda p: p.requires_grad, parameters))
        rank_zero_info(
            f"The model will start training with only {len(trainable_parameters)} "
            f"trainable parameters out of {len(parameters)}."
        )
        optimizer = optim.Adam(trainable_parameters, lr=self.lr)
        scheduler = MultiStepLR(optimizer, milestones=self.milestones, gamma=self.lr_scheduler_gamma)
        return [optimizer], [scheduler]


class MyLightningCLI(LitGpuCLI):
    def add_arguments_to_parser(self, parser):
        parser.add_lightning_class_args(MilestonesFinetuning, "finetuning")
        parser.link_arguments("data.batch_size", "model.batch_size")
        parser.link_arguments("finetuning.milestones", "model.milestones")
        parser.link_arguments("finetuning.train_bn", "model.train_bn")
        parser.set_defaults(
            {
                "trainer.max_epochs": 15,
                "trainer.enable_model_summary": False,
                "trainer.num_sanity_val_steps": 0,
            }
        )


def cli_main():
    MyLightningCLI(TransferLearningModel, CatDogImageDataModule, seed_everything_default=1234)


if __name__ == "__main__":
    cli_main()
