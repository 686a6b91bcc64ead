"""The small regression job the ``strategy: dp`` tests train (CPU and GPU variants)."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import RegressionModule
from lit_gpu.nets import FooNet


def dp_module(net: nn.Module | None = None) -> RegressionModule:
    """``FooNet(8, 2)`` (or ``net``) regressing 8 -> 8 features with SGD at lr 0.05."""
    return RegressionModule(
        net or FooNet(neural_num=8, layers=2), optimizer=partial(torch.optim.SGD, lr=0.05)
    )


def dp_data() -> SyntheticRegressionDataModule:
    """256 synthetic samples of 8 features, batches of 16."""
    return SyntheticRegressionDataModule(in_features=8, out_features=8, num_samples=256, batch_size=16)
