import lightning.pytorch as pl
import pytest
import torch
from torch.nn import functional as F

from lit_gpu.data import SyntheticRegressionDataModule
from lit_gpu.modules import ClassificationModule, RegressionModule
from lit_gpu.nets import FooNet, SimpleModel
from tests.helpers.trainers import quiet_trainer


def _trainer(tmp_path, **kw):
    return quiet_trainer(tmp_path, **kw)


def test_regression_loss_is_mse():
    module = RegressionModule(SimpleModel(4, 2))
    out, y = torch.randn(3, 2), torch.randn(3, 2)
    torch.testing.assert_close(module.compute_loss(out, y), F.mse_loss(out, y))


@pytest.mark.integration
def test_regression_loss_falls_on_synthetic_data(tmp_path):
    pl.seed_everything(0)
    dm = SyntheticRegressionDataModule(in_features=10, out_features=10, num_samples=512, batch_size=32)
    module = RegressionModule(
        SimpleModel(10, 10), optimizer=lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)
    )
    trainer = _trainer(tmp_path)
    before = trainer.validate(module, datamodule=dm, verbose=False)[0]["val/loss"]
    trainer = _trainer(tmp_path, max_epochs=5)
    trainer.fit(module, datamodule=dm)
    after = trainer.callback_metrics["val/loss"].item()
    assert after < 0.1 * before
    assert set(trainer.callback_metrics) >= {"train/loss", "val/loss"}


def test_classification_logs_loss_and_acc(tmp_path):
    x = torch.randn(64, 8)
    y = (x[:, 0] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    module = ClassificationModule(torch.nn.Linear(8, 2), num_classes=2)
    trainer = _trainer(tmp_path, max_epochs=3)
    trainer.fit(module, loader, loader)
    assert {"val/loss", "val/acc", "train/loss"} <= set(trainer.callback_metrics)
    metrics = trainer.test(module, loader, verbose=False)[0]
    assert set(metrics) == {"test/loss", "test/acc"}
    assert 0.0 <= metrics["test/acc"] <= 1.0


def test_classification_predict_returns_probabilities():
    module = ClassificationModule(torch.nn.Linear(8, 3), num_classes=3)
    probs = module.predict_step((torch.randn(5, 8), torch.zeros(5)), 0)
    assert probs.shape == (5, 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(5))


def test_subclass_overrides_loss(tmp_path):
    calls = []

    class L1Regression(RegressionModule):
        def compute_loss(self, outputs, targets):
            calls.append(1)
            return F.l1_loss(outputs, targets)

    dm = SyntheticRegressionDataModule(in_features=4, out_features=4, num_samples=64, batch_size=16)
    _trainer(tmp_path, max_epochs=1).fit(L1Regression(FooNet(4, 2)), datamodule=dm)
    assert len(calls) >= 4


def test_injected_optimizer_and_scheduler():
    module = RegressionModule(
        SimpleModel(),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.3),
        scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1),
        scheduler_interval="step",
    )
    conf = module.configure_optimizers()
    assert isinstance(conf["optimizer"], torch.optim.SGD)
    assert conf["optimizer"].param_groups[0]["lr"] == pytest.approx(0.3)
    assert conf["lr_scheduler"]["interval"] == "step"


def test_default_optimizer_is_adam():
    assert isinstance(RegressionModule(SimpleModel()).configure_optimizers(), torch.optim.Adam)


@pytest.mark.parametrize("train_acc", [False, True])
def test_train_accuracy_is_opt_in(tmp_path, train_acc):
    x = torch.randn(32, 8)
    y = (x[:, 0] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    module = ClassificationModule(torch.nn.Linear(8, 2), num_classes=2, train_acc=train_acc)
    trainer = _trainer(tmp_path)
    trainer.fit(module, loader)
    assert ("train/acc" in trainer.callback_metrics) is train_acc
    assert "train/loss" in trainer.callback_metrics


def test_num_classes_that_differs_from_the_nets_output_is_one_line():
    from lit_gpu.errors import LitGpuError

    module = ClassificationModule(net=SimpleModel(in_features=4, out_features=10), num_classes=5)
    outputs, targets = module(torch.zeros(3, 4)), torch.tensor([0, 1, 2])
    with pytest.raises(LitGpuError, match=r"SimpleModel outputs 10 classes but model.num_classes is 5"):
        module.compute_loss(outputs, targets)


@pytest.mark.parametrize("lr", [-1.0, -0.5])
def test_an_invalid_optimizer_argument_is_one_line_naming_the_key(lr):
    from functools import partial

    from lit_gpu.errors import LitGpuError

    module = RegressionModule(net=SimpleModel(), optimizer=partial(torch.optim.SGD, lr=lr))
    with pytest.raises(
        LitGpuError, match=rf"^model.optimizer.init_args.lr: {lr} refused by SGD \(Invalid lea"
    ):
        module.configure_optimizers()


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"lr": 0.1, "momentum": None}, "model.optimizer.init_args.momentum: None refused by SGD ('<' not"),
        ({"lr": torch.tensor([])}, "model.optimizer.init_args.lr: tensor([]) refused by SGD (Tensor lr"),
        ({"lr": 0.1, "weight_decay": "x"}, "model.optimizer.init_args.weight_decay: 'x' refused by SGD"),
    ],
)
def test_an_optimizer_argument_of_the_wrong_kind_is_one_line_naming_it(kwargs, needle):
    """``momentum: null`` or ``lr: {}`` in a config reach torch unchecked: the key is named, cause kept."""
    from functools import partial

    from lit_gpu.errors import LitGpuError

    module = RegressionModule(net=SimpleModel(), optimizer=partial(torch.optim.SGD, **kwargs))
    with pytest.raises(LitGpuError) as info:
        module.configure_optimizers()
    assert str(info.value).startswith(needle), info.value
    assert isinstance(info.value.__cause__, ValueError | TypeError)


def test_a_scheduler_argument_torch_refuses_is_one_line_naming_it():
    from functools import partial

    from lit_gpu.errors import LitGpuError

    scheduler = partial(torch.optim.lr_scheduler.LinearLR, start_factor=2.0)
    module = RegressionModule(
        net=SimpleModel(), optimizer=partial(torch.optim.SGD, lr=0.1), scheduler=scheduler
    )
    with pytest.raises(
        LitGpuError, match=r"^model.scheduler.init_args.start_factor: 2.0 refused by LinearLR"
    ):
        module.configure_optimizers()


def test_an_optimizer_that_fails_for_another_reason_keeps_its_traceback():
    """An error no config argument explains (a bug in code, not a setting) is not turned into one line."""

    class Broken(torch.optim.SGD):
        def __init__(self, params, lr=0.1):
            raise TypeError("a bug in the optimizer's own code")

    module = RegressionModule(net=SimpleModel(), optimizer=lambda params: Broken(params))
    with pytest.raises(TypeError, match="a bug"):
        module.configure_optimizers()


@pytest.mark.parametrize("fold", [1, 3, 128])
def test_train_loss_epoch_is_the_sample_weighted_mean_of_the_step_losses(tmp_path, fold, monkeypatch):
    """Step losses are kept and summed every LOSS_FOLD steps; the epoch mean weights each by its batch."""
    monkeypatch.setattr(RegressionModule, "LOSS_FOLD", fold)
    steps: list[tuple[float, int]] = []

    class Recording(RegressionModule):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            steps.append((loss.item(), len(batch[0])))
            return loss

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(70, 4, generator=g), torch.randn(70, 2, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=16)  # 4 batches of 16, one of 6
    module = Recording(SimpleModel(4, 2), optimizer=lambda p: torch.optim.SGD(p, lr=0.01))
    trainer = _trainer(tmp_path, max_epochs=1, log_every_n_steps=1)
    trainer.fit(module, loader)
    expected = sum(loss * n for loss, n in steps) / sum(n for _, n in steps)
    assert [n for _, n in steps] == [16, 16, 16, 16, 6]
    logged = trainer.callback_metrics["train/loss_epoch"].item()
    torch.testing.assert_close(logged, expected, rtol=1e-6, atol=0)
    assert module._train_losses == []


def test_train_loss_rewind_forgets_a_retried_step():
    """OOM recovery retries a step whose backward ran out of memory: its first try's loss is forgotten."""
    import torch

    from lit_gpu.modules import RegressionModule
    from lit_gpu.nets import SimpleModel

    module = RegressionModule(SimpleModel(2, 2))
    module._train_losses.append((torch.tensor(5.0), 2))
    module._fold_train_losses()  # a fold before the mark: summed and counted
    module._train_losses.append((torch.tensor(1.0), 4))
    mark = module.train_loss_mark()
    module._train_losses.append((torch.tensor(9.0), 4))  # the failed try
    module._fold_train_losses()  # folded before the retry: the rewind undoes the fold too
    module.rewind_train_loss(mark)
    assert [(loss.item(), n) for loss, n in module._train_losses] == [(1.0, 4)]
    assert module._train_loss_sum.item() == 10.0 and module._train_loss_count == 2
    module._train_losses.append((torch.tensor(3.0), 2))
    module._fold_train_losses()  # weighted by batch size: 5*2 + 1*4 + 3*2
    assert module._train_loss_sum.item() == 20.0 and module._train_loss_count == 8
