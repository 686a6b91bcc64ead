"""Seeded CIFAR-shaped image classification data (3x32x32, 10 classes), made in memory: no download."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from lit_gpu.data._checks import check_loader_args
from lit_gpu.data.stateful import ResumableDataLoader
from lit_gpu.devices import on_cuda

#: per-channel mean and std the images are normalized with (uint8 values / 255)
IMAGE_MEAN, IMAGE_STD = 0.5, 0.25


def make_images(
    num_samples: int, num_classes: int, channels: int, size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``num_samples`` uint8 images ``(N, C, size, size)`` and int64 labels ``(N,)``.

    Each class has a smooth random template (4x4 per channel, upsampled); an image is its class's
    template, scaled in contrast and covered in strong pixel noise: learnable, not solved at once,
    and cheap to make (a few seconds for 50,000 on a small CPU).
    """
    templates = torch.rand(num_classes, channels, 4, 4, generator=generator)
    templates = torch.nn.functional.interpolate(
        templates, size=(size, size), mode="bicubic", align_corners=False
    )
    labels = torch.randint(num_classes, (num_samples,), generator=generator)
    images = torch.empty(num_samples, channels, size, size, dtype=torch.uint8)
    chunk = 4096
    for start in range(0, num_samples, chunk):  # bounded float memory: 4096 images at a time
        y = labels[start : start + chunk]
        n = y.shape[0]
        base = templates[y]  # (n, C, size, size)
        contrast = 0.5 + torch.rand(n, 1, 1, 1, generator=generator)
        noise = 0.35 * torch.randn(n, channels, size, size, generator=generator)
        x = (base - 0.5) * contrast + 0.5 + noise
        images[start : start + n] = (x.clamp_(0, 1) * 255).round_().to(torch.uint8)
    return images, labels


class ImageTensors(Dataset):
    """``(image, label)`` pairs from uint8 tensors: float, normalized, optionally augmented per sample.

    Augmentation is CIFAR's usual one: a random crop of the image padded by 4 pixels (zeros) and a
    random horizontal flip, drawn from torch's global RNG (seeded per sample by lit_gpu's loader).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, augment: bool = False) -> None:
        self.images, self.labels, self.augment = images, labels, augment

    def __len__(self) -> int:
        return self.labels.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.images[index]  # (C, H, W) uint8
        if self.augment:
            _, h, w = x.shape
            padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
            i, j, flip = torch.randint(9, (3,)).tolist()
            x = padded[:, i : i + h, j : j + w]
            if flip % 2:
                x = x.flip(-1)
        x = x.to(torch.float32).div_(255).sub_(IMAGE_MEAN).div_(IMAGE_STD)
        return x, self.labels[index]


class SyntheticImageDataModule(pl.LightningDataModule):
    """CIFAR-shaped classification made in memory (:func:`make_images`), through real DataLoaders.

    The path a user's image data takes: per-sample decode-free fetch and augmentation in worker
    processes, pinned host memory, a copy to the GPU per batch. For GPU benchmarks (ResNet-18 in
    ``lit_gpu:resnet_gpu``) and tests; runs offline anywhere.

    Args:
        num_samples: Training images (validation and test get ``num_samples // 10`` each, at least 1).
        num_classes: Classes (labels ``0..num_classes-1``).
        image_size: Side of the square images.
        channels: Image channels.
        batch_size: Per-process batch size.
        num_workers: DataLoader worker processes.
        pin_memory: Page-locked host memory for the copies to the GPU; ``None``: on when training on CUDA.
        augment: Random crop (pad 4) and horizontal flip of training images.
        drop_last: Drop the last incomplete training batch (static shapes: CUDA graphs, compile).
        seed: Seed of the images and of the shuffling.
    """

    def __init__(
        self,
        num_samples: int = 50000,
        num_classes: int = 10,
        image_size: int = 32,
        channels: int = 3,
        batch_size: int = 256,
        num_workers: int = 4,
        pin_memory: bool | None = None,
        augment: bool = True,
        drop_last: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_loader_args(batch_size, num_workers)
        self.save_hyperparameters()
        self.num_samples, self.num_classes = num_samples, num_classes
        self.image_size, self.channels = image_size, channels
        self.batch_size, self.num_workers, self.pin_memory = batch_size, num_workers, pin_memory
        self.augment, self.drop_last, self.seed = augment, drop_last, seed

    @override
    def setup(self, stage: str | None = None) -> None:
        if hasattr(self, "train_set"):
            return
        g = torch.Generator().manual_seed(self.seed)
        held_out = max(1, self.num_samples // 10)
        images, labels = make_images(
            self.num_samples + 2 * held_out, self.num_classes, self.channels, self.image_size, g
        )
        n = self.num_samples
        self.train_set = ImageTensors(images[:n], labels[:n], augment=self.augment)
        self.val_set = ImageTensors(images[n : n + held_out], labels[n : n + held_out])
        self.test_set = ImageTensors(images[n + held_out :], labels[n + held_out :])

    def _use_pin_memory(self) -> bool:
        return self.pin_memory if self.pin_memory is not None else on_cuda(self.trainer)

    def _kwargs(self) -> dict:
        return dict(
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            pin_memory=self._use_pin_memory(),
            persistent_workers=self.num_workers > 0,
        )

    @override
    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        return ResumableDataLoader(
            self.train_set,
            shuffle=True,
            seed=self.seed,
            rank=rank,
            world_size=world,
            drop_last=self.drop_last,
            **self._kwargs(),
        )

    def _eval_loader(self, dataset: Dataset) -> DataLoader:
        return DataLoader(dataset, shuffle=False, **self._kwargs())

    @override
    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val_set)

    @override
    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_set)

    @override
    def predict_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_set)
