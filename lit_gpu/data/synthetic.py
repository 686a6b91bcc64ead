"""Seeded synthetic regression data: runs anywhere, offline, in seconds."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import override

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.resume.loaders import (
    ResumableDataLoader,
    check_counts,
    check_fits_in_memory,
    check_loader_args,
    check_number,
    rank_and_world,
)


class SyntheticRegressionDataModule(pl.LightningDataModule):
    """``x ~ N(0, 1)`` and a learnable target ``y = teacher(x) + noise``.

    The teacher is a fixed random map drawn from ``seed``: ``"linear"`` is ``x @ W + b``,
    ``"relu"`` is ``relu(x @ W)`` (reachable by bias-free ReLU nets such as ``FooNet``).

    Args:
        in_features: Input width.
        out_features: Target width.
        num_samples: Training samples (validation and test get a quarter each).
        batch_size: Per-process batch size.
        noise: Standard deviation of the Gaussian noise added to targets.
        teacher: ``"linear"`` or ``"relu"``.
        seed: Seed of the data and the teacher (independent of the training seed).
        num_workers: DataLoader workers.
        shuffle: Shuffle the training set each epoch (a permutation seeded by ``seed`` and the
            epoch; under DDP each rank takes a strided share of the same order).
    """

    def __init__(
        self,
        in_features: int = 10,
        out_features: int = 10,
        num_samples: int = 2048,
        batch_size: int = 64,
        noise: float = 0.05,
        teacher: str = "linear",
        seed: int = 0,
        num_workers: int = 0,
        shuffle: bool = True,
    ) -> None:
        super().__init__()
        check_loader_args(batch_size, num_workers)
        check_counts(
            in_features=(in_features, 1),
            out_features=(out_features, 1),
            num_samples=(num_samples, 1),
            seed=(seed, 0),
        )
        check_number("noise", noise)
        # x and y of train + val + test (a quarter each) and the teacher, as float32: 4 bytes a number
        rows = num_samples + 2 * max(1, num_samples // 4)
        needs = 4 * (rows * (in_features + out_features) + in_features * out_features + out_features)
        sizes = {"num_samples": num_samples, "in_features": in_features, "out_features": out_features}
        check_fits_in_memory(sizes, needs)
        if teacher not in ("linear", "relu"):
            raise LitGpuError(
                messages.BAD_DATA_CHOICE.format(name="teacher", choices="linear, relu", value=teacher)
            )
        self.save_hyperparameters()
        self.in_features = in_features
        self.out_features = out_features
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.noise = noise
        self.teacher = teacher
        self.seed = seed
        self.num_workers = num_workers
        self.shuffle = shuffle

    def _make(self, n: int, generator: torch.Generator, weight: torch.Tensor, bias: torch.Tensor):
        x = torch.randn(n, self.in_features, generator=generator)
        y = x @ weight
        y = torch.relu(y) if self.teacher == "relu" else y + bias
        y = y + self.noise * torch.randn(n, self.out_features, generator=generator)
        return TensorDataset(x, y)

    @override
    def setup(self, stage: str | None = None) -> None:
        g = torch.Generator().manual_seed(self.seed)
        weight = torch.randn(self.in_features, self.out_features, generator=g) / self.in_features**0.5
        bias = torch.randn(self.out_features, generator=g) * 0.1
        self.train_set = self._make(self.num_samples, g, weight, bias)
        self.val_set = self._make(max(1, self.num_samples // 4), g, weight, bias)
        self.test_set = self._make(max(1, self.num_samples // 4), g, weight, bias)

    def _loader(self, dataset: TensorDataset, shuffle: bool, train: bool = False) -> DataLoader:
        kwargs = dict(
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )
        if train:  # resumable at any sample; the loader shards itself under DDP (keeps shuffle: false)
            rank, world = rank_and_world(self.trainer)
            return ResumableDataLoader(
                dataset, shuffle=shuffle, seed=self.seed, rank=rank, world_size=world, **kwargs
            )
        # a private generator: starting an evaluation never draws from the global torch RNG
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(dataset, shuffle=shuffle, generator=generator, **kwargs)

    @override
    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=self.shuffle, train=True)

    @override
    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    @override
    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    @override
    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)
