"""Resumable training loaders: global sample position, elastic sharding, per-sample seeds."""

from __future__ import annotations

import random

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lightning.pytorch.trainer.states import RunningStage
from torch.utils.data import Dataset, TensorDataset

from lit_gpu.resume.loaders import (
    ResumableDataLoader,
    ResumableSampler,
    TensorLoader,
    sample_seeds,
    shard_positions,
)

N = 50


class Augmented(Dataset):
    """Sample ``i`` is ``i`` plus noise from all three global RNGs (what augmentations draw from)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        noise = torch.rand(()).item() + np.random.rand() + random.random()
        return torch.tensor([float(i), noise]), i


def _make(kind: str, *, batch_size: int, rank: int = 0, world_size: int = 1, drop_last: bool = False):
    if kind == "tensor":
        x = torch.arange(N, dtype=torch.float32).view(N, 1)
        return TensorLoader(
            x, torch.arange(N), batch_size=batch_size, shuffle=True, seed=3, rank=rank,
            world_size=world_size, drop_last=drop_last,
        )  # fmt: skip
    workers = int(kind.removeprefix("workers"))
    return ResumableDataLoader(
        Augmented(), batch_size=batch_size, shuffle=True, seed=3, rank=rank, world_size=world_size,
        drop_last=drop_last, num_workers=workers,
    )  # fmt: skip


KINDS = ["workers0", "workers2", "tensor"]


def _ids(batches) -> list[list[int]]:
    return [b[1].tolist() for b in batches]


def _epoch(loader, epoch: int = 1) -> list:
    loader.sampler.set_epoch(epoch)
    return list(loader)


def _stop_after(loader, k: int, epoch: int = 1) -> tuple[list, dict]:
    loader.sampler.set_epoch(epoch)
    it = iter(loader)
    taken = [next(it) for _ in range(k)]
    return taken, loader.state_dict()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("start", [0, 7, 24, 49])
def test_ranks_share_exactly_the_remaining_positions(start: int, world: int, drop_last: bool):
    shards = [
        shard_positions(N, start=start, rank=r, world_size=world, drop_last=drop_last) for r in range(world)
    ]
    assert len({len(s) for s in shards}) == 1  # the same number of samples on every rank
    real = sorted(p for s in shards for p in s.tolist() if p < N)
    if drop_last:
        assert real == list(range(start, start + len(real))) and N - start - len(real) < world
    else:
        assert real == list(range(start, N))  # every remaining sample once; padding wraps (p >= N)


@pytest.mark.parametrize("kind", KINDS)
def test_resume_yields_exactly_the_rest_of_the_epoch(kind: str):
    reference = _epoch(_make(kind, batch_size=4))
    taken, state = _stop_after(_make(kind, batch_size=4), 5)
    assert state["epoch"] == 1 and state["position"] == 20 and state["num_items"] == N
    resumed = _make(kind, batch_size=4)
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(1)  # Lightning sets the same epoch again on resume: no reset
    rest = list(resumed)
    assert len(resumed) == len(reference) == 13 and len(rest) == 8  # len: the whole epoch, for Lightning
    assert resumed.remaining_batches() == 13  # a finished pass: another one would be a whole epoch
    assert len(taken) + len(rest) == len(reference)
    for got, want in zip(taken + rest, reference, strict=True):
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b)  # same samples, same random per-sample work


@pytest.mark.parametrize("kind", ["workers0", "tensor"])
@pytest.mark.parametrize(("before", "after"), [((1, 8), (2, 4)), ((2, 4), (1, 8)), ((2, 4), (4, 2))])
def test_elastic_resume_with_the_same_global_batch(kind: str, before, after):
    """Global batch j (all ranks' batch j together) holds the same samples whatever W x B is."""
    (w0, b0), (w1, b1) = before, after
    reference = [set(ids) for ids in _ids(_epoch(_make(kind, batch_size=8)))]  # 1 process, global 8
    _, state = _stop_after(_make(kind, batch_size=b0, rank=0, world_size=w0), 2)  # rank 0's state
    assert state["position"] == 16
    shards = []
    for r in range(w1):
        loader = _make(kind, batch_size=b1, rank=r, world_size=w1)
        loader.load_state_dict(state)
        loader.sampler.set_epoch(1)
        assert loader.remaining_batches() == len(loader) - 2  # Lightning's step count stays right
        shards.append(_ids(loader))
    merged = [set().union(*(shard[j] for shard in shards)) for j in range(len(shards[0]))]
    assert len(merged) == len(reference) - 2
    assert merged[:-1] == reference[2:-1]  # continues at sample 16, global batch by global batch
    assert reference[-1] <= merged[-1]  # the last one may carry wrap-around padding


@pytest.mark.parametrize("kind", KINDS)
def test_changed_batch_size_continues_at_the_same_sample(kind: str):
    reference = [i for ids in _ids(_epoch(_make(kind, batch_size=8))) for i in ids]
    _, state = _stop_after(_make(kind, batch_size=8), 3)
    resumed = _make(kind, batch_size=5)  # e.g. after an OOM halved the batch
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(1)
    assert resumed.remaining_batches() == 6  # ceil((50 - 24) / 5)
    assert [i for ids in _ids(resumed) for i in ids] == reference[24:]


def test_next_epoch_starts_from_its_first_sample():
    _, state = _stop_after(_make("workers0", batch_size=4), 5)
    loader = _make("workers0", batch_size=4)
    loader.load_state_dict(state)
    loader.sampler.set_epoch(2)  # resumed, then the next epoch begins
    assert _ids(loader) == _ids(_epoch(_make("workers0", batch_size=4), 2))


def test_per_sample_random_work_depends_on_the_sample_only():
    """Same values with 0 or 2 workers, on 1 or 2 ranks; the main process's RNGs are untouched."""
    torch.manual_seed(0)
    before = torch.get_rng_state()
    values = {}
    for workers in (0, 2):
        batches = _epoch(ResumableDataLoader(Augmented(), batch_size=4, seed=3, num_workers=workers))
        values[workers] = {int(i): v for b in batches for i, v in zip(b[1], b[0][:, 1], strict=True)}
    assert torch.equal(torch.get_rng_state(), before)
    assert values[0] == values[2]
    two_ranks = {}
    for r in range(2):
        loader = ResumableDataLoader(Augmented(), batch_size=3, seed=3, rank=r, world_size=2)
        two_ranks.update({int(i): v for b in _epoch(loader) for i, v in zip(b[1], b[0][:, 1], strict=True)})
    assert two_ranks == values[0]
    # and a new epoch gives new draws
    other = _epoch(ResumableDataLoader(Augmented(), batch_size=4, seed=3), epoch=2)
    assert {int(i): v for b in other for i, v in zip(b[1], b[0][:, 1], strict=True)} != values[0]


def test_state_of_other_data_is_ignored_with_a_warning():
    _, state = _stop_after(_make("workers0", batch_size=4), 5)
    small = ResumableDataLoader(TensorDataset(torch.arange(10)), batch_size=4, seed=3)
    with pytest.warns(UserWarning, match="does not fit this data"):
        small.load_state_dict(state)
    assert small.state_dict()["position"] == 0 and len(list(small)) == 3


def test_lightning_leaves_the_sampler_alone_under_ddp():
    """The loader owns sharding: Lightning must not inject its DistributedSampler (it would re-shard)."""
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    loader = ResumableDataLoader(Augmented(), batch_size=4, rank=1, world_size=2)
    prepared = trainer._data_connector._prepare_dataloader(loader, shuffle=True, mode=RunningStage.TRAINING)
    assert prepared is loader and isinstance(prepared.sampler, ResumableSampler)


_MASK64 = (1 << 64) - 1


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """sample_seeds' specification: one position in Python's masked ints (the one-at-a-time original)."""
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + position) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) >> 1


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**31),
    positions=st.lists(st.integers(0, 2**48), min_size=1, max_size=40),
)
def test_the_whole_pass_seeds_are_the_one_at_a_time_seeds(seed, epoch, positions):
    """sample_seeds (numpy's wrapping uint64) gives what sample_seed (Python's masked ints) gives."""
    want = [sample_seed(seed, epoch, p) for p in positions]
    assert sample_seeds(seed, epoch, torch.tensor(positions)) == want
    assert all(0 <= s < 2**63 for s in want)
