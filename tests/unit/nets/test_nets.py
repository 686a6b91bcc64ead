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
    from tests.conftest import REPO_ROOT

    files = sorted((REPO_ROOT / "lit_gpu" / "nets").glob("*.py"))
    assert files
    for path in files:
        text = path.read_text()
        assert "import lightning" not in text and "from lightning" not in text, path.name
