import lightning.pytorch as pl
import pytest
import torch
from torchvision.datasets import MNIST

from lit_gpu import messages
from lit_gpu.data import MNISTDataModule
from lit_gpu.data.mnist import MNIST_MEAN, MNIST_STD, idx_file_problem
from lit_gpu.errors import LitGpuError


def test_reads_idx_files_with_torchvision_parser(fake_mnist_dir):
    dm = MNISTDataModule(str(fake_mnist_dir), batch_size=32, num_workers=0, val_size=100, download=False)
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (500, 100, 200)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (32, 1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and y.min() >= 0 and y.max() <= 9
    raw = MNIST(str(fake_mnist_dir), train=False, download=False)
    x0, _ = dm.test_set[0]
    expected = (raw.data[0].float() / 255 - MNIST_MEAN) / MNIST_STD
    torch.testing.assert_close(x0[0], expected)


def test_split_is_seeded(fake_mnist_dir):
    def val_indices(seed):
        dm = MNISTDataModule(str(fake_mnist_dir), num_workers=0, val_size=50, seed=seed, download=False)
        dm.setup("fit")
        return list(dm.val_set.indices)

    assert val_indices(1) == val_indices(1)
    assert val_indices(1) != val_indices(2)


def test_missing_files_one_clear_line(tmp_path):
    dm = MNISTDataModule(str(tmp_path), download=False)
    with pytest.raises(LitGpuError) as info:
        dm.prepare_data()
    msg = str(info.value)
    assert "\n" not in msg
    assert f"{tmp_path}/MNIST/raw/" in msg and "-ubyte" in msg and "--data.download" in msg


def test_offline_download_failure_is_one_clear_line(tmp_path, monkeypatch):
    def offline(self):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried mirrors...")

    monkeypatch.setattr(MNIST, "download", offline)
    dm = MNISTDataModule(str(tmp_path), download=True)
    with pytest.raises(LitGpuError) as info:
        dm.prepare_data()
    msg = str(info.value)
    assert "\n" not in msg and "download failed" in msg and "MNIST/raw" in msg


def test_pin_memory_follows_accelerator(fake_mnist_dir):
    dm = MNISTDataModule(str(fake_mnist_dir), num_workers=0, val_size=100, download=False)
    assert dm._use_pin_memory() is False  # no trainer attached
    trainer = pl.Trainer(accelerator="cpu", logger=False)
    dm.trainer = trainer
    assert dm._use_pin_memory() is False

    trainer.strategy._root_device = torch.device("cuda", 0)  # what a CUDA run's strategy reports
    assert dm._use_pin_memory() is True
    dm.pin_memory = False
    assert dm._use_pin_memory() is False


def test_no_pin_memory_warning_on_cpu(fake_mnist_dir, recwarn):
    dm = MNISTDataModule(str(fake_mnist_dir), batch_size=16, num_workers=0, val_size=100, download=False)
    dm.trainer = pl.Trainer(accelerator="cpu", logger=False)
    dm.setup("fit")
    next(iter(dm.train_dataloader()))
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]


def test_a_truncated_idx_file_is_named_with_its_size(tmp_path):
    from tests.helpers.fake_mnist import make_fake_mnist

    root = make_fake_mnist(tmp_path, n_train=120, n_test=20)
    images = root / "MNIST" / "raw" / "train-images-idx3-ubyte"
    full = images.stat().st_size
    images.write_bytes(images.read_bytes()[: full // 2])
    dm = MNISTDataModule(str(root), batch_size=8, num_workers=0, val_size=20, download=False)
    with pytest.raises(LitGpuError) as info:
        dm.setup("fit")
    assert str(info.value) == messages.TRUNCATED_IDX_FILE.format(path=images, size=full // 2, expected=full)
    dm.setup("test")  # the test split's files are fine


def test_a_file_that_is_not_idx_is_named(tmp_path):
    from tests.helpers.fake_mnist import make_fake_mnist

    root = make_fake_mnist(tmp_path, n_train=120, n_test=20)
    labels = root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    labels.write_text("<html>rate limited</html>")
    assert "is not an IDX file" in idx_file_problem(labels)
    assert idx_file_problem(root / "MNIST" / "raw" / "t10k-images-idx3-ubyte") is None


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"batch_size": -1}, {"num_workers": -1}])
def test_bad_loader_settings_are_refused_at_construction(kwargs):
    with pytest.raises(LitGpuError, match=r"^data\.\w+ must be"):
        MNISTDataModule("data", **kwargs)
