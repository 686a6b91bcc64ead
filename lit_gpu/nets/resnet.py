"""torchvision's ResNet-18 and ResNet-50, built here (no weights, no download), with the usual stem for 32x32
images."""

from __future__ import annotations

from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet


class ResNet18(ResNet):
    """torchvision's ResNet-18 (random init): same blocks, same state-dict keys.

    ``torchvision.models`` itself is not buildable from a config (its builders can download weights),
    so this class is how a config names the net. For CIFAR-sized images (3x32x32) the ImageNet stem
    (7x7 stride-2 conv, then a max-pool) would shrink the input to 8x8 before the first block; the
    CIFAR stem replaces it with a 3x3 stride-1 conv and no pooling, as CIFAR ResNets do.

    Args:
        num_classes: Output logits.
        in_channels: Channels of the input images.
        cifar_stem: 3x3 stride-1 first conv and no max-pool (for 32x32 inputs).
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, cifar_stem: bool = True) -> None:
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
        self.num_classes, self.in_channels, self.cifar_stem = num_classes, in_channels, cifar_stem
        if cifar_stem:
            self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        elif in_channels != 3:
            self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")

    # forward: torchvision's ResNet._forward_impl: (B, C, H, W) -> (B, num_classes)


class ResNet50(ResNet):
    """torchvision's ResNet-50 (random init, bottleneck blocks): same blocks, same state-dict keys.

    The ImageNet network (224x224 inputs: 7x7 stride-2 stem and a max-pool), buildable from a config as
    :class:`ResNet18` is; ``cifar_stem`` swaps in the 3x3 stride-1 stem for 32x32 images.

    Args:
        num_classes: Output logits.
        in_channels: Channels of the input images.
        cifar_stem: 3x3 stride-1 first conv and no max-pool (for 32x32 inputs).
    """

    def __init__(self, num_classes: int = 1000, in_channels: int = 3, cifar_stem: bool = False) -> None:
        super().__init__(Bottleneck, [3, 4, 6, 3], num_classes=num_classes)
        self.num_classes, self.in_channels, self.cifar_stem = num_classes, in_channels, cifar_stem
        if cifar_stem:
            self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        elif in_channels != 3:
            self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
