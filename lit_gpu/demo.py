"""What a notebook (or a test) needs besides lit_gpu itself: a work folder, and MNIST or a stand-in.

    from lit_gpu import demo

    WORK = demo.work_dir()                     # a fresh temp folder, now the working folder
    DATA_DIR, STANDIN = demo.mnist_or_standin()  # real MNIST if found, else a learnable stand-in

The stand-in is written in torchvision's IDX layout (``<root>/MNIST/raw/*-ubyte``), so
:class:`~lit_gpu.data.MNISTDataModule` reads it like the real files: 28x28 noise images of 10
classes, class ``k`` marked by a brighter 7x7 block at place ``k``. Small nets learn it in a few
dozen steps, offline, on any CPU. Needs numpy only.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import numpy as np

from lit_gpu.cli.main import check_package

check_package()  # a notebook started beside a clone named lit_gpu: one clear line, not a half-made package

__all__ = ["DATA_DIR_ENV", "STANDIN_ENV", "has_mnist", "mnist_or_standin", "work_dir", "write_mnist_standin"]

DATA_DIR_ENV = "LIT_GPU_DATA_DIR"  # a folder holding MNIST/raw/*-ubyte (the real files)
STANDIN_ENV = "LIT_GPU_FAKE_MNIST"  # "1": use the stand-in even where real MNIST is found (CI, tests)
_RAW = [f"{split}-{kind}-ubyte" for split in ("train", "t10k") for kind in ("images-idx3", "labels-idx1")]


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist_standin(
    root: str | Path,
    n_train: int = 1200,
    n_test: int = 300,
    *,
    seed: int = 0,
    noise: int = 140,
    signal: int = 50,
) -> Path:
    """Write a learnable stand-in for MNIST under ``root/MNIST/raw/`` (torchvision's IDX layout).

    Args:
        root: The folder to pass as ``data_dir``; created if missing.
        n_train: Training images (``MNISTDataModule`` holds ``val_size`` of them out for validation).
        n_test: Test images.
        seed: Seed of labels and pixels: the same arguments write the same bytes.
        noise: Background pixels are uniform in ``[0, noise)``.
        signal: Added to the 7x7 block that marks the class (clipped at 255); the larger
            ``signal`` is against ``noise``, the easier the task.

    Returns:
        ``root``, as a ``Path``.
    """
    root = Path(root)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        rng.shuffle(labels)
        images = rng.integers(0, noise, size=(n, 28, 28))
        for i, k in enumerate(labels):
            r, c = divmod(int(k), 4)
            block = images[i, 2 + r * 9 : 9 + r * 9, 1 + c * 7 : 7 + c * 7]
            images[i, 2 + r * 9 : 9 + r * 9, 1 + c * 7 : 7 + c * 7] = np.minimum(block + signal, 255)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return root


def has_mnist(folder: str | Path | None) -> bool:
    """``folder`` holds the four MNIST files in torchvision's layout (``folder/MNIST/raw/*-ubyte``)."""
    return folder is not None and all((Path(folder) / "MNIST" / "raw" / name).is_file() for name in _RAW)


def mnist_or_standin(standin_dir: str | Path = "mnist_standin", *search: str | Path) -> tuple[Path, bool]:
    """A ``data_dir`` for :class:`~lit_gpu.data.MNISTDataModule`, and whether it is the stand-in.

    Real MNIST is used when ``$LIT_GPU_DATA_DIR``, or one of ``search``, holds it (and
    ``$LIT_GPU_FAKE_MNIST`` is not ``1``); otherwise :func:`write_mnist_standin` writes the stand-in
    to ``standin_dir`` (relative to the working folder). Nothing is downloaded.
    """
    if os.environ.get(STANDIN_ENV) != "1":
        for folder in (os.environ.get(DATA_DIR_ENV), *search):
            if folder and has_mnist(folder):
                return Path(folder).resolve(), False
    return write_mnist_standin(Path(standin_dir).resolve()), True


def work_dir(prefix: str = "lit_gpu_nb_") -> Path:
    """A new temporary folder, made the working folder: a notebook's ``runs/``, checkpoints and PNGs
    land there, and each run of the notebook starts clean. Lightning's "💡 Tip" adverts are dropped from
    then on (:func:`lit_gpu.cli.quiet.drop_tips`)."""
    from lit_gpu.cli.quiet import drop_tips

    drop_tips()
    folder = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    os.chdir(folder)
    return folder
