"""A tiny, learnable fake MNIST written in the IDX format torchvision reads."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def _write_idx_images(path: Path, images: np.ndarray) -> None:
    n, rows, cols = images.shape
    with open(path, "wb") as f:
        f.write(struct.pack(">HBBIII", 0, 0x08, 3, n, rows, cols))
        f.write(images.astype(np.uint8).tobytes())


def _write_idx_labels(path: Path, labels: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack(">HBBI", 0, 0x08, 1, len(labels)))
        f.write(labels.astype(np.uint8).tobytes())


def make_fake_mnist(root: Path, n_train: int = 600, n_test: int = 200, seed: int = 0) -> Path:
    """Write learnable fake MNIST (class k = bright 7x7 block at a fixed place + noise) in IDX format.

    Returns ``root``; the files land in ``root/MNIST/raw/`` as torchvision expects.
    """
    rng = np.random.default_rng(seed)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    def images_for(labels: np.ndarray) -> np.ndarray:
        imgs = rng.integers(0, 60, size=(len(labels), 28, 28))
        for i, k in enumerate(labels):
            r, c = divmod(int(k), 4)
            imgs[i, 2 + r * 9 : 9 + r * 9, 1 + c * 7 : 7 + c * 7] = 255
        return imgs

    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        rng.shuffle(labels)
        _write_idx_images(raw / f"{prefix}-images-idx3-ubyte", images_for(labels))
        _write_idx_labels(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return root
