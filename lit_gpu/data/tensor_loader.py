"""Batches by index slicing of in-memory tensors: no workers, no collate, no per-sample work."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from lit_gpu.data.stateful import GlobalPosition, batches_for


class TensorLoader(GlobalPosition):
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

    Resumable: ``state_dict()`` is the job's global position in the epoch's order (see
    :mod:`lit_gpu.data.stateful`); after ``load_state_dict()`` the next pass yields this rank's
    share of the remaining samples, on any world size and batch size.

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
        self.drop_last_shards = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.num_items = n
        self._init_position()

    #: Lightning's loader checks read ``batch_sampler``; batching is built in here.
    batch_sampler = None

    @property
    def sampler(self) -> TensorLoader:
        """Itself, so that Lightning's per-epoch ``loader.sampler.set_epoch(epoch)`` reaches it."""
        return self

    @property
    def position_state(self) -> TensorLoader:
        """Itself: the object holding the epoch / seed / position state."""
        return self

    @property
    def num_samples(self) -> int:
        """Samples this rank sees per epoch (before ``drop_last`` trims the last batch)."""
        return self.shard_size(0)

    def indices(self, start: int = 0) -> torch.Tensor:
        """This rank's sample indices for the current epoch from global position ``start``, in batch order."""
        return self.order()[self.positions(start) % self.num_items]

    def remaining_batches(self) -> int:
        """Batches this rank yields from the current position to the end of the epoch."""
        return batches_for(self.shard_size(self.start), self.batch_size, self.drop_last)

    def __len__(self) -> int:
        return batches_for(self.num_samples, self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        start = self.start
        count = self.remaining_batches()
        b = self.batch_size
        if not self.shuffle and self.world_size == 1:
            for i in range(count):  # plain slices: views, no copy
                lo = start + i * b
                batch = tuple([t[lo : lo + b] for t in self.tensors])  # a list: no generator frames
                self._advance(i + 1, b)  # handed out = consumed (a checkpoint after this step counts it)
                yield batch
        else:
            idx = self.indices(start).to(self.tensors[0].device)
            for i in range(count):
                batch_idx = idx[i * b : (i + 1) * b]
                batch = tuple([t.index_select(0, batch_idx) for t in self.tensors])
                self._advance(i + 1, b)
                yield batch
        self._finish_pass()
