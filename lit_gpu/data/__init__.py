"""LightningDataModules, one per file."""

from lit_gpu.data.images import SyntheticImageDataModule
from lit_gpu.data.mnist import MNISTDataModule
from lit_gpu.data.synthetic import SyntheticRegressionDataModule

__all__ = ["MNISTDataModule", "SyntheticImageDataModule", "SyntheticRegressionDataModule"]
