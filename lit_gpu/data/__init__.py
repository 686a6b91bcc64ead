"""LightningDataModules, one per file."""

from lit_gpu.data.images import SyntheticImageDataModule
from lit_gpu.data.mnist import MNISTDataModule
from lit_gpu.data.synthetic import SyntheticRegressionDataModule
from lit_gpu.resume.loaders import ResumableDataLoader, TensorLoader

__all__ = [
    "MNISTDataModule",
    "ResumableDataLoader",
    "SyntheticImageDataModule",
    "SyntheticRegressionDataModule",
    "TensorLoader",
]
