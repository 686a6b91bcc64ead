"""A small CNN for 28x28 grayscale digits (>= 99 % MNIST test accuracy)."""

from __future__ import annotations

import torch
from torch import nn


class MnistCNN(nn.Module):
    """Two conv blocks (conv-BN-ReLU x2 + max-pool) and a linear head.

    Args:
        channels: Width of the first block; the second block uses twice as many.
        num_classes: Number of output logits.
        dropout: Dropout before the classifier (0 disables it).
    """

    def __init__(self, channels: int = 32, num_classes: int = 10, dropout: float = 0.1) -> None:
        super().__init__()
        c1, c2 = channels, channels * 2
        self.features = nn.Sequential(
            nn.Conv2d(1, c1, 3, padding=1, bias=False),
            nn.BatchNorm2d(c1),
            nn.ReLU(inplace=True),
            nn.Conv2d(c1, c1, 3, padding=1, bias=False),
            nn.BatchNorm2d(c1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1, bias=False),
            nn.BatchNorm2d(c2),
            nn.ReLU(inplace=True),
            nn.Conv2d(c2, c2, 3, padding=1, bias=False),
            nn.BatchNorm2d(c2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(dropout),
            nn.Linear(c2, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)  # (B, 1, 28, 28) -> (B, 2C, 7, 7)
        return self.head(x)  # (B, 2C, 7, 7) -> (B, num_classes)
