"""TensorLoader (shuffle/shard/drop_last semantics) and MNISTDataModule's tensor storage."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.trainer.states import RunningStage
from torch.utils.data import DataLoader, TensorDataset

from lit_gpu.data import MNISTDataModule
from lit_gpu.errors import LitGpuError
from lit_gpu.resume.loaders import TensorLoader
from tests.helpers.trainers import quiet_trainer


def _loader(n: int = 100, **kwargs) -> TensorLoader:
    x = torch.arange(n, dtype=torch.float32).view(n, 1)
    y = torch.arange(n)
    kwargs.setdefault("batch_size", 8)
    return TensorLoader(x, y, **kwargs)


def test_shuffle_is_deterministic_per_seed_and_epoch():
    a, b = _loader(shuffle=True, seed=3), _loader(shuffle=True, seed=3)
    assert torch.equal(a.indices(), b.indices())
    first = a.indices().clone()
    a.set_epoch(1)
    assert not torch.equal(a.indices(), first)  # new order each epoch
    a.set_epoch(0)
    assert torch.equal(a.indices(), first)  # and the same again for the same epoch
    assert not torch.equal(_loader(shuffle=True, seed=4).indices(), first)  # seed matters
    assert sorted(first.tolist()) == list(range(100))  # a permutation


def test_batches_are_the_rows_at_the_indices():
    loader = _loader(n=20, batch_size=6, shuffle=True, seed=1)
    idx = loader.indices()
    batches = list(loader)
    assert [len(xb) for xb, _ in batches] == [6, 6, 6, 2] == [len(yb) for _, yb in batches]
    assert torch.equal(torch.cat([yb for _, yb in batches]), idx)
    assert torch.equal(torch.cat([xb for xb, _ in batches]).view(-1), idx.float())


def test_unshuffled_keeps_order():
    ys = torch.cat([yb for _, yb in _loader(n=10, batch_size=4)])
    assert ys.tolist() == list(range(10))


@pytest.mark.parametrize("shuffle", [True, False])
def test_rank_shards_are_disjoint_and_cover(shuffle: bool):
    world = 4
    shards = [_loader(n=100, shuffle=shuffle, seed=7, rank=r, world_size=world) for r in range(world)]
    for s in shards:
        s.set_epoch(2)
    got = [set(torch.cat([yb for _, yb in s]).tolist()) for s in shards]
    assert all(len(g) == 25 for g in got)
    assert set().union(*got) == set(range(100))
    assert sum(len(g) for g in got) == 100  # disjoint
    assert len({len(s) for s in shards}) == 1  # same number of steps on every rank


def test_uneven_shards_pad_or_drop():
    padded = [_loader(n=10, batch_size=2, shuffle=True, rank=r, world_size=3) for r in range(3)]
    assert [p.num_samples for p in padded] == [4, 4, 4]
    assert set().union(*(set(p.indices().tolist()) for p in padded)) == set(range(10))  # wraps around
    dropped = [
        _loader(n=10, batch_size=2, shuffle=True, drop_last=True, rank=r, world_size=3) for r in range(3)
    ]
    idx = [set(d.indices().tolist()) for d in dropped]
    assert [len(i) for i in idx] == [3, 3, 3] and len(set().union(*idx)) == 9  # tail dropped, disjoint
    assert [len(d) for d in dropped] == [1, 1, 1]  # 3 samples, batch 2, last batch dropped


def test_drop_last():
    assert len(_loader(n=20, batch_size=6, drop_last=True)) == 3
    assert [len(yb) for _, yb in _loader(n=20, batch_size=6, drop_last=True, shuffle=True)] == [6, 6, 6]
    assert len(_loader(n=20, batch_size=6)) == 4


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="same length"):
        TensorLoader(torch.zeros(3), torch.zeros(4), batch_size=2)
    with pytest.raises(ValueError, match="rank"):
        _loader(rank=2, world_size=2)


def test_lightning_keeps_the_loader_under_ddp():
    """Lightning swaps in a DistributedSampler for DataLoaders only; TensorLoader passes untouched."""
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    connector = trainer._data_connector
    loader = _loader(shuffle=True)
    assert connector._prepare_dataloader(loader, shuffle=True, mode=RunningStage.TRAINING) is loader
    dl = DataLoader(TensorDataset(torch.zeros(8)), batch_size=2)
    replaced = connector._prepare_dataloader(dl, shuffle=True, mode=RunningStage.TRAINING)
    assert type(replaced.sampler).__name__ == "DistributedSampler"  # the contrast


class _EpochRecorder(pl.Callback):
    def __init__(self) -> None:
        self.orders: list[list[int]] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        loader = trainer.train_dataloader
        assert isinstance(loader, TensorLoader)
        self.orders.append(loader.indices().tolist())


def test_trainer_sets_the_epoch(fake_mnist_dir):
    from lit_gpu.modules import ClassificationModule
    from lit_gpu.nets import FastMnistNet

    dm = MNISTDataModule(str(fake_mnist_dir), batch_size=64, val_size=100, storage="tensor", download=False)
    recorder = _EpochRecorder()
    trainer = quiet_trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, callbacks=[recorder])
    trainer.fit(ClassificationModule(FastMnistNet(4, 8)), datamodule=dm)
    assert len(recorder.orders) == 2 and recorder.orders[0] != recorder.orders[1]
    assert sorted(recorder.orders[0]) == list(range(500))


def test_tensor_storage_matches_torchvision_path(fake_mnist_dir):
    kwargs = dict(data_dir=str(fake_mnist_dir), batch_size=50, val_size=100, download=False, num_workers=0)
    classic = MNISTDataModule(**kwargs)
    fast = MNISTDataModule(**kwargs, storage="tensor")
    for dm in (classic, fast):
        dm.setup("fit")
        dm.setup("test")
    raw_test = fast.test_set.data.clone()
    for name in ("val", "test"):
        expect_x, expect_y = next(iter(getattr(classic, f"{name}_dataloader")()))
        got_x, got_y = next(iter(getattr(fast, f"{name}_dataloader")()))
        assert got_x.shape == expect_x.shape == (50, 1, 28, 28) and got_x.dtype == torch.float32
        assert torch.equal(got_x, expect_x)  # ToTensor then Normalize: the same operations, the same bits
        assert torch.equal(got_y, expect_y)
    assert torch.equal(fast.test_set.data, raw_test)  # normalized in place, yet in its own copy
    x, y = fast.split_tensors("train")
    assert x.shape == (500, 1, 28, 28) and len(y) == 500  # same 500/100 split as the torchvision path
    assert set(classic.train_set.indices) == set(range(600)) - set(classic.val_set.indices)
    assert len(fast.train_dataloader()) == 10


def test_gpu_storage_falls_back_to_cpu_and_bad_storage_fails(fake_mnist_dir):
    dm = MNISTDataModule(str(fake_mnist_dir), val_size=100, download=False, storage="gpu")
    dm.setup("fit")
    assert dm.split_tensors("train")[0].device.type == "cpu"  # no CUDA trainer: stays on the CPU
    with pytest.raises(LitGpuError, match="storage"):
        MNISTDataModule(storage="pil")
