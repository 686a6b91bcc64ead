"""Seeded CIFAR-shaped image classification data (3x32x32, 10 classes), made in memory: no download."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from lit_gpu.data._checks import check_counts, check_fits_in_memory, check_loader_args
from lit_gpu.data._trainer import rank_and_world, use_pin_memory
from lit_gpu.data.stateful import ResumableDataLoader

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
    """``(image, label)`` pairs from uint8 tensors: float, normalized, optionally augmented.

    Augmentation is CIFAR's usual one: a random crop of the image padded by 4 pixels (zeros) and a
    random horizontal flip. A batch is fetched at once (:meth:`getitems_seeded`: one gather, the crops
    and flips as index arithmetic, one normalization), about 30x cheaper than one sample at a time;
    each sample's crop and flip come from its own 63-bit seed, so they do not depend on which batch
    or worker fetched it. lit_gpu's loader gives the seeds (exact resume); a plain ``DataLoader``
    (``__getitems__``) draws them from torch's RNG.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, augment: bool = False) -> None:
        self.images, self.labels, self.augment = images, labels, augment

    def __len__(self) -> int:
        return self.labels.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A batch for a plain ``DataLoader`` (its batched fetch): seeds drawn from torch's global RNG."""
        seeds = torch.randint(0, 2**62, (len(indices),)) if self.augment else None
        return self.getitems_seeded(indices, seeds)

    def getitems_seeded(
        self, indices: list[int], seeds: list[int] | torch.Tensor | None
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Samples ``indices``, sample ``k`` cropped and flipped as ``seeds[k]`` says; a list of pairs."""
        index = torch.as_tensor(indices, dtype=torch.int64)
        x = self.images[index]  # (n, C, H, W) uint8
        if self.augment and seeds is not None:
            x = _crop_and_flip(x, torch.as_tensor(seeds, dtype=torch.int64))
        x = x.to(torch.float32).div_(255).sub_(IMAGE_MEAN).div_(IMAGE_STD)
        return list(zip(x.unbind(0), self.labels[index].unbind(0), strict=True))


def _crop_and_flip(x: torch.Tensor, seeds: torch.Tensor) -> torch.Tensor:
    """Per sample: a crop of the image padded by 4 at offset (seed byte 0 % 9, seed byte 1 % 9), then a
    horizontal flip if bit 16 of its seed is set. ``x``: (n, C, H, W); the same shape comes back."""
    n, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))  # (n, C, H + 8, W + 8)
    top, left = (seeds & 0xFF) % 9, ((seeds >> 8) & 0xFF) % 9  # (n,)
    flip = ((seeds >> 16) & 1).bool()
    rows = top[:, None] + torch.arange(h)  # (n, H)
    cols = left[:, None] + torch.arange(w)  # (n, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    batch = torch.arange(n)[:, None, None, None]
    channel = torch.arange(c)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]


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
        check_counts(
            num_samples=(num_samples, 1),
            num_classes=(num_classes, 1),
            image_size=(image_size, 1),
            channels=(channels, 1),
            seed=(seed, 0),
        )
        rows = num_samples + 2 * max(1, num_samples // 10)  # uint8 pixels and int64 labels
        sizes = {"num_samples": num_samples, "image_size": image_size, "channels": channels}
        check_fits_in_memory(sizes, rows * (channels * image_size * image_size + 8))
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

    def _kwargs(self) -> dict:
        return dict(
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            pin_memory=use_pin_memory(self.pin_memory, self.trainer),
            persistent_workers=self.num_workers > 0,
        )

    @override
    def train_dataloader(self) -> DataLoader:
        rank, world = rank_and_world(self.trainer)
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
