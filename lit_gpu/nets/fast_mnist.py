"""A two-conv net for time-to-accuracy MNIST runs (the shape of the public speed records)."""

from __future__ import annotations

import torch
from torch import nn
from typing_extensions import override


class FastMnistNet(nn.Module):
    """Two conv-maxpool-BN-ReLU blocks and one linear layer: cheap, yet >= 99 % on MNIST.

    Pooling right after each conv makes BN and ReLU run on a quarter of the pixels.

    Args:
        c1: Channels of the first conv.
        c2: Channels of the second conv.
        num_classes: Number of output logits.
        kernel_size: Kernel size of both convs (no padding).
    """

    def __init__(self, c1: int = 16, c2: int = 32, num_classes: int = 10, kernel_size: int = 3) -> None:
        super().__init__()
        k = kernel_size
        side = ((28 - k + 1) // 2 - k + 1) // 2
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, k, bias=False),
            nn.MaxPool2d(2),
            nn.BatchNorm2d(c1),
            nn.ReLU(inplace=True),
            nn.Conv2d(c1, c2, k, bias=False),
            nn.MaxPool2d(2),
            nn.BatchNorm2d(c2),
            nn.ReLU(inplace=True),
        )
        self.head = nn.Linear(c2 * side * side, num_classes)

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)  # (B, 1, 28, 28) -> (B, c2, 5, 5) for k=3
        return self.head(x.flatten(1))  # (B, c2 * 5 * 5) -> (B, num_classes)
