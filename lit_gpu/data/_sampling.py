"""Training samplers that keep the user's ``shuffle`` choice under DDP."""

from __future__ import annotations

import os

import lightning.pytorch as pl
from torch.utils.data import Dataset, DistributedSampler, Sampler


def distributed_train_sampler(
    datamodule: pl.LightningDataModule, dataset: Dataset, shuffle: bool
) -> Sampler | None:
    """A ``DistributedSampler`` honouring ``shuffle`` when training on several processes, else ``None``.

    Lightning injects its own ``DistributedSampler`` into training loaders with ``shuffle=True``
    whatever the loader said; building it here keeps ``shuffle: false`` meaningful under DDP.
    Each rank gets a distinct, strided shard (``rank, rank + W, ...``) of the same order.
    """
    trainer = getattr(datamodule, "trainer", None)
    if trainer is None or trainer.world_size <= 1:
        return None
    return DistributedSampler(
        dataset,
        num_replicas=trainer.world_size,
        rank=trainer.global_rank,
        shuffle=shuffle,
        seed=int(os.getenv("PL_GLOBAL_SEED", 0)),
    )
