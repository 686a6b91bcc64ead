"""Plain ``nn.Module`` networks. No Lightning imports here: use them in any PyTorch code."""

from lit_gpu.nets.fast_mnist import FastMnistNet
from lit_gpu.nets.foonet import FooNet
from lit_gpu.nets.mnist_cnn import MnistCNN
from lit_gpu.nets.resnet import ResNet18, ResNet50
from lit_gpu.nets.simple import SimpleModel

__all__ = ["FastMnistNet", "FooNet", "MnistCNN", "ResNet18", "ResNet50", "SimpleModel"]
