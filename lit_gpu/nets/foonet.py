"""FooNet: the toy multi-layer net used to show DataParallel batch splitting."""

from __future__ import annotations

import torch
from torch import nn
from typing_extensions import override


class FooNet(nn.Module):
    """A stack of ``layers`` bias-free ``Linear(neural_num, neural_num)`` + ReLU blocks.

    Args:
        neural_num: Width of every layer (input and output size).
        layers: Number of Linear + ReLU blocks.
    """

    def __init__(self, neural_num: int = 3, layers: int = 3) -> None:
        super().__init__()
        self.linears = nn.ModuleList([nn.Linear(neural_num, neural_num, bias=False) for _ in range(layers)])

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.linears:  # (B, N) -> (B, N)
            x = torch.relu(linear(x))
        return x
