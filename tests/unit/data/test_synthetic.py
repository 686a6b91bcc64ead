import pytest
import torch

from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.errors import LitGpuError


def test_seeded_and_shaped():
    a = SyntheticRegressionDataModule(in_features=5, out_features=3, num_samples=40, seed=3)
    b = SyntheticRegressionDataModule(in_features=5, out_features=3, num_samples=40, seed=3)
    a.setup()
    b.setup()
    assert a.train_set.tensors[0].shape == (40, 5) and a.train_set.tensors[1].shape == (40, 3)
    assert len(a.val_set) == 10
    for ta, tb in zip(a.train_set.tensors, b.train_set.tensors, strict=True):
        assert torch.equal(ta, tb)


def test_targets_are_learnable_linear_map():
    dm = SyntheticRegressionDataModule(in_features=6, out_features=2, num_samples=512, noise=0.01)
    dm.setup()
    x, y = dm.train_set.tensors
    x1 = torch.cat([x, torch.ones(len(x), 1)], dim=1)
    solution = torch.linalg.lstsq(x1, y).solution
    residual = (x1 @ solution - y).pow(2).mean()
    assert residual < 1e-3 < y.var()


def test_relu_teacher_is_non_negative_before_noise():
    dm = SyntheticRegressionDataModule(num_samples=256, noise=0.0, teacher="relu")
    dm.setup()
    assert (dm.train_set.tensors[1] >= 0).all()


def test_rejects_unknown_teacher():
    with pytest.raises(LitGpuError, match="teacher"):
        SyntheticRegressionDataModule(teacher="cubic")


def test_shuffle_flag_controls_order():
    dm = SyntheticRegressionDataModule(num_samples=64, batch_size=64, shuffle=False)
    dm.setup()
    x, _ = next(iter(dm.train_dataloader()))
    assert torch.equal(x, dm.train_set.tensors[0])


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"batch_size": 0}, "data.batch_size"),
        ({"batch_size": -1}, "data.batch_size"),
        ({"num_workers": -2}, "data.num_workers"),
    ],
)
def test_bad_loader_settings_are_one_line_errors(kwargs, key):
    from lit_gpu.errors import LitGpuError

    with pytest.raises(LitGpuError, match=rf"^{key} must be .*, got -?\d+; set --{key}"):
        SyntheticRegressionDataModule(**kwargs)
