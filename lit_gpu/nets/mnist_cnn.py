"""A small CNN for 28x28 grayscale digits (>= 99 % MNIST test accuracy in a few epochs)."""

from __future__ import annotations

import torch
from torch import nn
from typing_extensions import override


class MnistCNN(nn.Module):
    """Two conv-BN-ReLU-pool blocks and a two-layer classifier.

    Args:
        channels: Width of the first block; the second block uses twice as many.
        num_classes: Number of output logits.
        hidden: Width of the hidden classifier layer.
        dropout: Dropout before each classifier layer (0 disables it).
    """

    def __init__(
        self, channels: int = 32, num_classes: int = 10, hidden: int = 128, dropout: float = 0.25
    ) -> None:
        super().__init__()
        c1, c2 = channels, channels * 2
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1, bias=False),
            nn.BatchNorm2d(c1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1, bias=False),
            nn.BatchNorm2d(c2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(c2 * 7 * 7, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)  # (B, 1, 28, 28) -> (B, 2C, 7, 7)
        return self.head(x)  # (B, 2C, 7, 7) -> (B, num_classes)
