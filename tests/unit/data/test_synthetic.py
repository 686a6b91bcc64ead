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


@pytest.mark.parametrize(
    "kwargs, line",
    [
        ({"out_features": None}, "data.out_features must be a positive integer, got None"),
        ({"in_features": 0}, "data.in_features must be a positive integer, got 0"),
        ({"num_samples": 2.5}, "data.num_samples must be a positive integer, got 2.5"),
        ({"num_samples": True}, "data.num_samples must be a positive integer, got True"),
        ({"seed": -1}, "data.seed must be an integer >= 0, got -1"),
        ({"noise": float("inf")}, "data.noise must be a finite number >= 0, got inf"),
        ({"noise": "0.1"}, "data.noise must be a finite number >= 0, got '0.1'"),
    ],
)
def test_bad_sizes_are_one_line_at_init(kwargs, line):
    """Settings that would otherwise fail deep inside torch (``out_features: null``) are refused at init."""
    from lit_gpu.errors import LitGpuError

    with pytest.raises(LitGpuError) as info:
        SyntheticRegressionDataModule(**kwargs)
    assert str(info.value).startswith(line) and "\n" not in str(info.value)


def test_data_that_cannot_fit_in_memory_is_refused_before_allocating(monkeypatch):
    from lit_gpu.errors import LitGpuError
    from lit_gpu.resume import loaders as _checks

    monkeypatch.setattr(_checks, "host_memory_bytes", lambda: 10**6)  # a 1 MB machine
    SyntheticRegressionDataModule(num_samples=1000, in_features=10, out_features=10)  # 120 kB: fits
    with pytest.raises(LitGpuError) as info:
        SyntheticRegressionDataModule(num_samples=100_000, in_features=10, out_features=10)
    assert str(info.value) == (
        "data.num_samples=100000, data.in_features=10, data.out_features=10: the data's tensors would need "
        "12.0 MB, more than this machine's 1.0 MB of memory; make data.num_samples smaller "
        "(--data.num_samples, or num_samples: in your config)"
    )
    with pytest.raises(LitGpuError, match=r"make data.in_features smaller"):
        SyntheticRegressionDataModule(num_samples=100, in_features=100_000)
