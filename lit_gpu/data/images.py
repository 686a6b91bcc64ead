"""Seeded CIFAR-shaped image classification data (3x32x32, 10 classes), made in memory: no download."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from lit_gpu.resume.loaders import (
    ResumableDataLoader,
    check_counts,
    check_fits_in_memory,
    check_loader_args,
    rank_and_world,
    use_pin_memory,
)

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


def normalize_images(x: torch.Tensor) -> torch.Tensor:
    """uint8 images (any shape, layout or device) as float32, scaled to [0, 1] and normalized with
    :data:`IMAGE_MEAN` and :data:`IMAGE_STD`; the layout (channels-last or not) is kept."""
    return x.to(torch.float32).div_(255).sub_(IMAGE_MEAN).div_(IMAGE_STD)


class ImageTensors(Dataset):
    """``(image, label)`` pairs from uint8 tensors: optionally augmented, float and normalized or uint8.

    Augmentation is CIFAR's usual one: a random crop of the image padded by 4 pixels (zeros) and a
    random horizontal flip, done on the uint8 pixels (a slice copy per sample). A batch is fetched at once
    (:meth:`getitems_seeded`); each sample's crop and flip come from its own 63-bit seed, so they do not
    depend on which batch or worker fetched it. lit_gpu's loader gives the seeds (exact resume); a plain
    ``DataLoader`` (``__getitems__``) draws them from torch's RNG.

    Args:
        images: ``(N, C, H, W)`` uint8.
        labels: ``(N,)`` int64.
        augment: Crop and flip each sample.
        normalize: Return float32 images (:func:`normalize_images`); ``False`` returns the uint8 pixels, a
            quarter of the bytes through the workers, pinned memory and the copy to the GPU, for a
            normalization on the device (:class:`SyntheticImageDataModule` does that).
    """

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, augment: bool = False, normalize: bool = True
    ) -> None:
        self.images, self.labels, self.augment, self.normalize = images, labels, augment, normalize

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
        if self.augment and seeds is not None:
            x = crop_and_flip(self.images, index.tolist(), torch.as_tensor(seeds, dtype=torch.int64).tolist())
        else:
            x = self.images[index]  # (n, C, H, W) uint8
        if self.normalize:
            x = normalize_images(x)
        return list(zip(x.unbind(0), self.labels[index].unbind(0), strict=True))


def crop_and_flip(images: torch.Tensor, indices: list[int], seeds: list[int]) -> torch.Tensor:
    """Images ``indices``, image ``k`` padded by 4 (zeros) and cropped at offset (seed byte 0 % 9, seed byte
    1 % 9), then flipped horizontally if bit 16 of ``seeds[k]`` is set. ``images``: (N, C, H, W); returns
    (len(indices), C, H, W) of its dtype.

    One slice copy per sample: the part of the crop inside the image lands at its place in a zeroed
    output (the padding stays zero). At 224 px that is ~10x faster than gathering the crops by index
    arithmetic over the whole batch, at 32 px ~2x (``tests/unit/data/test_images.py`` holds that
    formulation as the reference the two must agree with).
    """
    c, h, w = images.shape[1:]
    out = torch.zeros(len(indices), c, h, w, dtype=images.dtype)
    for k, (i, seed) in enumerate(zip(indices, seeds, strict=True)):
        top, left = (seed & 0xFF) % 9 - 4, ((seed >> 8) & 0xFF) % 9 - 4  # crop offset in the image
        y0, y1 = max(0, -top), min(h, h - top)  # rows of the output that come from the image
        x0, x1 = max(0, -left), min(w, w - left)
        if y0 >= y1 or x0 >= x1:  # an image smaller than the offset: the crop is all padding
            continue
        patch = images[i, :, y0 + top : y1 + top, x0 + left : x1 + left]
        if (seed >> 16) & 1:
            out[k, :, y0:y1, w - x1 : w - x0] = patch.flip(-1)
        else:
            out[k, :, y0:y1, x0:x1] = patch
    return out


class SyntheticImageDataModule(pl.LightningDataModule):
    """CIFAR-shaped classification made in memory (:func:`make_images`), through real DataLoaders.

    The path a user's image data takes: per-sample decode-free fetch and augmentation of uint8 pixels in
    worker processes, pinned host memory, a copy to the GPU per batch, the normalization there
    (:meth:`on_after_batch_transfer`). For GPU benchmarks (ResNet-18 in
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
        raw = {"normalize": False}  # uint8 through the loaders: normalized on the device (below)
        self.train_set = ImageTensors(images[:n], labels[:n], augment=self.augment, **raw)
        self.val_set = ImageTensors(images[n : n + held_out], labels[n : n + held_out], **raw)
        self.test_set = ImageTensors(images[n + held_out :], labels[n + held_out :], **raw)

    @override
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """The batch's uint8 images normalized where they arrived (:func:`normalize_images`).

        The loaders carry uint8 pixels, a quarter of float32's bytes through the workers' collate, the
        pinned copy and the copy to the GPU; the GPU normalizes them in a few kernels, as timm's
        ``PrefetchLoader`` does. On a CPU the "device" is the host: the same function, the same values.
        """
        x, *rest = batch  # (images, labels) as the default collate makes it: a list
        if not isinstance(x, torch.Tensor) or x.dtype != torch.uint8:
            return batch
        parts = [normalize_images(x), *rest]
        return tuple(parts) if isinstance(batch, tuple) else parts

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
