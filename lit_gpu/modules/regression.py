"""Regression with mean squared error."""

from __future__ import annotations

import torch
from torch.nn import functional as F
from typing_extensions import override

from lit_gpu.modules.base import LitModule


class RegressionModule(LitModule):
    """MSE regression on ``(inputs, targets)`` batches.

    Override ``compute_loss`` for another loss (e.g. ``F.l1_loss``). Logs ``{stage}/loss``.
    """

    @override
    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(outputs.float(), targets.float())
