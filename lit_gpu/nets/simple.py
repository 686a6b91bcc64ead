"""The one-layer model the tutorials start from."""

from __future__ import annotations

import torch
from torch import nn
from typing_extensions import override


class SimpleModel(nn.Module):
    """A single ``nn.Linear`` layer.

    Args:
        in_features: Size of each input sample.
        out_features: Size of each output sample.
    """

    def __init__(self, in_features: int = 10, out_features: int = 10) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)  # (B, in) -> (B, out)
