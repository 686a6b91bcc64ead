"""lit_gpu.demo: the MNIST stand-in (read by torchvision like the real files) and a notebook's work folder."""

from __future__ import annotations

import os

import torch
from torchvision.datasets import MNIST

from lit_gpu import demo


def test_standin_is_mnist_shaped_balanced_learnable_and_seeded(tmp_path):
    root = demo.write_mnist_standin(tmp_path / "a", n_train=100, n_test=30, seed=3)
    train, test = MNIST(str(root), train=True), MNIST(str(root), train=False)
    assert train.data.shape == (100, 28, 28) and test.data.shape == (30, 28, 28)
    assert torch.bincount(train.targets).tolist() == [10] * 10
    # class k is a brighter 7x7 block at place k: the block's mean alone tells the classes apart
    blocks = torch.stack(
        [train.data[:, 2 + r * 9 : 9 + r * 9, 1 + c * 7 : 7 + c * 7].float().mean((1, 2)) for r, c in
         (divmod(k, 4) for k in range(10))], dim=1
    )  # fmt: skip
    assert (blocks.argmax(1) == train.targets).float().mean() > 0.95
    again = demo.write_mnist_standin(tmp_path / "b", n_train=100, n_test=30, seed=3)
    for name in ("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert (root / "MNIST/raw" / name).read_bytes() == (again / "MNIST/raw" / name).read_bytes()


def test_mnist_or_standin_prefers_real_files_unless_told(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(demo.STANDIN_ENV, raising=False)
    monkeypatch.delenv(demo.DATA_DIR_ENV, raising=False)
    path, standin = demo.mnist_or_standin()
    assert standin and path == tmp_path / "mnist_standin" and demo.has_mnist(path)

    real = demo.write_mnist_standin(tmp_path / "real", n_train=20, n_test=10)  # plays the real files
    monkeypatch.setenv(demo.DATA_DIR_ENV, str(real))
    assert demo.mnist_or_standin("elsewhere") == (real, False)
    assert not (tmp_path / "elsewhere").exists()
    monkeypatch.setenv(demo.STANDIN_ENV, "1")
    assert demo.mnist_or_standin("elsewhere") == (tmp_path / "elsewhere", True)


def test_work_dir_is_new_and_becomes_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    first, second = demo.work_dir(), demo.work_dir()
    assert first != second and first.parent == tmp_path.resolve() and first.name.startswith("lit_gpu_nb_")
    assert os.getcwd() == str(second) and not any(first.iterdir())


def test_work_dir_drops_lightnings_cloud_tips(tmp_path, monkeypatch, caplog):
    import logging
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR: the folder lands in tmp_path
    monkeypatch.chdir(tmp_path)
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    monkeypatch.setattr(logger, "filters", [])  # this test's filters only, restored afterwards
    demo.work_dir()
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("💡 Tip: For seamless cloud logging and experiment tracking, try installing litlogger")
        logger.info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]
