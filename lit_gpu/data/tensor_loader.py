"""Batches by index slicing of in-memory tensors: no workers, no collate, no per-sample work."""

from __future__ import annotations

from collections.abc import Iterator

import torch


class TensorLoader:
    """An iterable "dataloader" over tensors that share their first dimension.

    Each epoch it draws one permutation from a ``torch.Generator`` seeded by ``(seed, epoch)``, so
    every rank agrees on it, and rank ``r`` keeps the strided shard ``perm[r::world_size]``. Batches
    are index-selects on the stored tensors, which stay wherever they are (CPU or GPU).

    Lightning only swaps samplers of ``torch.utils.data.DataLoader`` objects, so it leaves this
    loader alone under DDP; it still calls ``loader.sampler.set_epoch(epoch)`` each epoch, which
    is why ``sampler`` returns the loader itself.

    Shards are equal in size on every rank (DDP needs the same number of steps per rank): with
    ``drop_last=False`` the permutation is padded by wrapping around, as ``DistributedSampler``
    does; with ``drop_last=True`` its tail is dropped, and so is each shard's incomplete last batch.

    Args:
        *tensors: Tensors of equal length ``N`` (e.g. images ``(N, 1, 28, 28)`` and labels ``(N,)``).
        batch_size: Samples per batch on this rank.
        shuffle: Draw a new permutation every epoch (otherwise keep the stored order).
        drop_last: Drop the incomplete last batch (and the uneven tail across ranks).
        seed: Base seed of the permutations.
        rank: This process's rank.
        world_size: Number of processes sharing the data.
    """

    def __init__(
        self,
        *tensors: torch.Tensor,
        batch_size: int,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not tensors:
            raise ValueError("TensorLoader needs at least one tensor")
        n = len(tensors[0])
        if any(len(t) != n for t in tensors):
            raise ValueError(f"all tensors must have the same length, got {[len(t) for t in tensors]}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.tensors = tensors
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0

    #: Lightning's loader checks read ``batch_sampler``; batching is built in here.
    batch_sampler = None

    @property
    def sampler(self) -> TensorLoader:
        """Itself, so that Lightning's per-epoch ``loader.sampler.set_epoch(epoch)`` reaches it."""
        return self

    @property
    def num_samples(self) -> int:
        """Samples this rank sees per epoch (before ``drop_last`` trims the last batch)."""
        n = len(self.tensors[0])
        if self.drop_last:
            return n // self.world_size
        return -(-n // self.world_size)

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch`` (called by Lightning before each epoch)."""
        self.epoch = epoch

    def indices(self) -> torch.Tensor:
        """This rank's sample indices for the current epoch, in batch order."""
        n = len(self.tensors[0])
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(n, generator=generator)
        else:
            order = torch.arange(n)
        total = self.num_samples * self.world_size
        if total > n:  # pad by wrapping around so every rank gets the same count
            order = torch.cat([order, order[: total - n]])
        return order[:total][self.rank :: self.world_size]

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return -(-self.num_samples // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        idx = self.indices()
        device = self.tensors[0].device
        if not self.shuffle and self.world_size == 1:
            for i in range(len(self)):  # plain slices: views, no copy
                yield tuple(t[i * self.batch_size : (i + 1) * self.batch_size] for t in self.tensors)
            return
        idx = idx.to(device)
        for i in range(len(self)):
            batch_idx = idx[i * self.batch_size : (i + 1) * self.batch_size]
            yield tuple(t.index_select(0, batch_idx) for t in self.tensors)
