"""LightningModules. Each takes a plain ``net`` (chosen in YAML with ``class_path``)."""

from lit_gpu import strategies as _strategies  # noqa: F401  (registers Trainer(strategy="dp"))
from lit_gpu.modules.base import LitModule
from lit_gpu.modules.classification import ClassificationModule
from lit_gpu.modules.regression import RegressionModule

__all__ = ["ClassificationModule", "LitModule", "RegressionModule"]
