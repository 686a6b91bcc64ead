import pytest
import torch

from lit_gpu.nets import FooNet, MnistCNN, SimpleModel


def test_simple_model_is_one_linear():
    net = SimpleModel(10, 4)
    assert [type(m).__name__ for m in net.children()] == ["Linear"]
    assert net(torch.randn(5, 10)).shape == (5, 4)


def test_foonet_layers_are_bias_free_and_output_is_relu():
    net = FooNet(neural_num=6, layers=4)
    assert len(net.linears) == 4
    assert all(layer.bias is None for layer in net.linears)
    out = net(torch.randn(16, 6))
    assert out.shape == (16, 6)
    assert (out >= 0).all()


def test_foonet_is_the_seed_computation():
    torch.manual_seed(0)
    net = FooNet(neural_num=3, layers=3)
    x = torch.randn(8, 3)
    expected = x
    for layer in net.linears:
        expected = torch.relu(expected @ layer.weight.T)
    torch.testing.assert_close(net(x), expected)


@pytest.mark.parametrize("batch", [1, 7])
def test_mnist_cnn_shapes(batch):
    net = MnistCNN(channels=8)
    assert net(torch.randn(batch, 1, 28, 28)).shape == (batch, 10)


def test_nets_have_no_lightning_imports():
    from tests.helpers.paths import REPO_ROOT

    files = sorted((REPO_ROOT / "lit_gpu" / "nets").glob("*.py"))
    assert files
    for path in files:
        text = path.read_text()
        assert "import lightning" not in text and "from lightning" not in text, path.name


@pytest.mark.integration
def test_nets_import_with_torch_alone(tmp_path):
    """An exported net rebuilds where only torch is installed (Lightning imports are blocked)."""
    import subprocess
    import sys

    from tests.helpers.paths import REPO_ROOT

    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('lightning', 'torchmetrics', 'jsonargparse'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import torch\n"
        "from lit_gpu.nets import FooNet, MnistCNN, SimpleModel\n"
        "print(MnistCNN()(torch.zeros(2, 1, 28, 28)).shape[-1], 'lightning' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["10", "False"]


def test_resnet50_is_torchvisions_with_either_stem():
    from torchvision.models.resnet import Bottleneck, ResNet

    from lit_gpu.nets import ResNet50

    net = ResNet50(num_classes=7)
    assert set(net.state_dict()) == set(ResNet(Bottleneck, [3, 4, 6, 3], num_classes=7).state_dict())
    assert net.conv1.kernel_size == (7, 7) and not isinstance(net.maxpool, torch.nn.Identity)
    cifar = ResNet50(num_classes=3, in_channels=1, cifar_stem=True)
    assert cifar.conv1.kernel_size == (3, 3) and isinstance(cifar.maxpool, torch.nn.Identity)
    assert cifar(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
