"""The tests' fake MNIST: :func:`lit_gpu.demo.write_mnist_standin` with an easy contrast (a 255 block)."""

from __future__ import annotations

from pathlib import Path

from lit_gpu.demo import write_mnist_standin


def make_fake_mnist(root: Path, n_train: int = 600, n_test: int = 200, seed: int = 0) -> Path:
    """Learnable fake MNIST (class k = a saturated 7x7 block at place k + noise) in ``root/MNIST/raw/``."""
    return write_mnist_standin(root, n_train, n_test, seed=seed, noise=60, signal=255)
