"""SyntheticImageDataModule and ImageTensors: CIFAR-shaped data made in memory, batched and seeded fetch."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from lit_gpu.data import SyntheticImageDataModule
from lit_gpu.data.images import IMAGE_MEAN, IMAGE_STD, ImageTensors, crop_and_flip, make_images
from lit_gpu.nets import ResNet18
from lit_gpu.resume.loaders import ResumableDataLoader, SeededSamples
from tests.helpers.run_if import RunIf


def _norm(x: torch.Tensor) -> torch.Tensor:
    return x.float().div(255).sub(IMAGE_MEAN).div(IMAGE_STD)


def test_images_are_seeded_shaped_and_every_class_appears():
    a = make_images(300, 10, 3, 32, torch.Generator().manual_seed(1))
    b = make_images(300, 10, 3, 32, torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert a[0].shape == (300, 3, 32, 32) and a[0].dtype == torch.uint8
    assert set(a[1].tolist()) == set(range(10))


def test_each_sample_is_cropped_and_flipped_as_its_seed_says():
    images, labels = make_images(16, 10, 3, 32, torch.Generator().manual_seed(0))
    data = ImageTensors(images, labels, augment=True)
    padded = [F.pad(images[i], (4, 4, 4, 4)) for i in range(16)]
    got = data.getitems_seeded([3, 5, 7], [2 | (5 << 8) | (1 << 16), 0, 8 | (8 << 8)])
    assert torch.equal(got[0][0], _norm(padded[3][:, 2:34, 5:37].flip(-1)))
    assert torch.equal(got[1][0], _norm(padded[5][:, 0:32, 0:32]))
    assert torch.equal(got[2][0], _norm(padded[7][:, 8:40, 8:40]))
    assert [int(y) for _, y in got] == [int(labels[i]) for i in (3, 5, 7)]
    # the same seed gives the same sample, whatever batch it is fetched in
    alone = data.getitems_seeded([5], [0])
    assert torch.equal(alone[0][0], got[1][0])


def _crops_by_index_arithmetic(x: torch.Tensor, seeds: torch.Tensor) -> torch.Tensor:
    """The specification of crop_and_flip as one gather over the padded batch (the previous formulation)."""
    n, c, h, w = x.shape
    padded = F.pad(x, (4, 4, 4, 4))
    top, left = (seeds & 0xFF) % 9, ((seeds >> 8) & 0xFF) % 9
    flip = ((seeds >> 16) & 1).bool()
    rows = top[:, None] + torch.arange(h)
    cols = left[:, None] + torch.arange(w)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    batch, channel = torch.arange(n)[:, None, None, None], torch.arange(c)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]


@pytest.mark.parametrize("size", [1, 3, 5, 8, 32])
def test_the_slice_crops_are_the_gathered_crops_for_every_offset_and_flip(size):
    images, _ = make_images(20, 10, 3, size, torch.Generator().manual_seed(size))
    seeds = [top | (left << 8) | (flip << 16) for top in range(9) for left in range(9) for flip in (0, 1)]
    seeds += torch.randint(0, 2**62, (50,), generator=torch.Generator().manual_seed(1)).tolist()
    indices = [k % 20 for k in range(len(seeds))]
    want = _crops_by_index_arithmetic(images[torch.tensor(indices)], torch.tensor(seeds))
    assert torch.equal(crop_and_flip(images, indices, seeds), want)


def test_the_data_module_carries_uint8_and_normalizes_after_the_transfer():
    dm = SyntheticImageDataModule(num_samples=32, batch_size=8, num_workers=0, image_size=8, seed=2)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch[0].dtype == torch.uint8 and isinstance(batch, list)
    x, y = dm.on_after_batch_transfer(batch, 0)
    assert torch.equal(x, _norm(batch[0])) and x.dtype == torch.float32 and torch.equal(y, batch[1])
    last = x.contiguous(memory_format=torch.channels_last)  # a float batch passes as it is
    assert dm.on_after_batch_transfer((last, y), 0)[0] is last
    layout = batch[0].contiguous(memory_format=torch.channels_last)  # the layout is kept
    assert dm.on_after_batch_transfer([layout, y], 0)[0].is_contiguous(memory_format=torch.channels_last)
    plain = next(iter(dm.val_dataloader()))[0]
    want = ImageTensors(dm.val_set.images, dm.val_set.labels)[0][0]  # normalize=True: float from the fetch
    assert torch.equal(dm.on_after_batch_transfer([plain, y], 0)[0][0], want)


def test_without_augmentation_a_sample_is_the_normalized_image():
    images, labels = make_images(4, 10, 3, 32, torch.Generator().manual_seed(0))
    x, y = ImageTensors(images, labels)[2]
    assert torch.equal(x, _norm(images[2])) and int(y) == int(labels[2])


def test_lit_gpus_loader_fetches_whole_batches_without_touching_the_global_rng():
    images, labels = make_images(64, 10, 3, 32, torch.Generator().manual_seed(0))
    data = ImageTensors(images, labels, augment=True)
    calls = []
    original = data.getitems_seeded
    data.getitems_seeded = lambda i, s: calls.append(len(i)) or original(i, s)
    state = torch.get_rng_state()
    batches = list(ResumableDataLoader(data, batch_size=16, seed=3))
    assert calls == [16, 16, 16, 16] and torch.equal(torch.get_rng_state(), state)
    again = list(ResumableDataLoader(ImageTensors(images, labels, augment=True), batch_size=16, seed=3))
    for (x1, y1), (x2, y2) in zip(batches, again, strict=True):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    # the keys SeededSamples receives decide everything: 0 workers or several give the same batches
    assert isinstance(ResumableDataLoader(data, batch_size=16).dataset, SeededSamples)


def test_a_plain_dataloader_gets_batches_too():
    images, labels = make_images(40, 10, 3, 32, torch.Generator().manual_seed(0))
    loader = DataLoader(ImageTensors(images, labels, augment=True), batch_size=16, drop_last=True)
    shapes = [tuple(x.shape) for x, _ in loader]
    assert shapes == [(16, 3, 32, 32), (16, 3, 32, 32)]


def test_the_data_module_trains_resnet18_a_step_on_cpu():
    dm = SyntheticImageDataModule(num_samples=64, batch_size=8, num_workers=0, image_size=32)
    dm.setup("fit")
    assert len(dm.train_set) == 64 and len(dm.val_set) == 6 and len(dm.test_set) == 6
    x, y = dm.on_after_batch_transfer(next(iter(dm.train_dataloader())), 0)
    assert x.shape == (8, 3, 32, 32) and y.shape == (8,)
    net = ResNet18(num_classes=10)
    assert net(x).shape == (8, 10)
    keys = set(net.state_dict())
    from torchvision.models.resnet import BasicBlock, ResNet

    assert keys == set(ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10).state_dict())  # torchvision's keys
    assert net.conv1.kernel_size == (3, 3) and isinstance(net.maxpool, torch.nn.Identity)
    imagenet_stem = ResNet18(num_classes=5, cifar_stem=False, in_channels=1)
    assert imagenet_stem(torch.zeros(2, 1, 64, 64)).shape == (2, 5)


def test_image_sizes_are_checked_at_init(monkeypatch):
    import pytest

    from lit_gpu.errors import LitGpuError
    from lit_gpu.resume import loaders as _checks

    with pytest.raises(LitGpuError, match=r"^data.channels must be a positive integer, got None"):
        SyntheticImageDataModule(channels=None)
    monkeypatch.setattr(_checks, "host_memory_bytes", lambda: 10**6)
    with pytest.raises(LitGpuError, match=r"^data.num_samples=50000, .* make data.num_samples smaller"):
        SyntheticImageDataModule()


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_on_a_gpu_the_pixels_travel_as_uint8_and_normalize_there_as_on_the_host(tmp_path):
    """The pinned uint8 batch is copied and normalized on the GPU to the host's values, and a fit with
    lit_gpu's lean batch on the GPU sees float batches."""
    from lightning.pytorch.callbacks import Callback

    from lit_gpu.fastpath.batch import LeanTrainingBatch
    from lit_gpu.fastpath.step import LeanOptimizerStep
    from lit_gpu.modules import ClassificationModule
    from tests.helpers.trainers import quiet_trainer

    dm = SyntheticImageDataModule(
        num_samples=64, batch_size=16, num_workers=2, image_size=32, pin_memory=True
    )
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.uint8 and x.is_pinned()
    on_gpu, _ = dm.on_after_batch_transfer([x.cuda(non_blocking=True), y.cuda()], 0)
    assert torch.equal(on_gpu.cpu(), _norm(x))
    seen = []

    class Look(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            seen.append((batch[0].dtype, batch[0].device.type))

    lean = LeanTrainingBatch()
    trainer = quiet_trainer(
        tmp_path, accelerator="gpu", devices=1, max_steps=3, limit_val_batches=0,
        callbacks=[Look(), LeanOptimizerStep(), lean],
    )  # fmt: skip
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    trainer.fit(ClassificationModule(net, num_classes=10), datamodule=dm)
    assert lean.blocker is None and seen == [(torch.float32, "cuda")] * 3
